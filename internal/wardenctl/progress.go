package wardenctl

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/wardenhq/warden/internal/policyfetch"
)

// progressInterval is how often the progress bar is redrawn at most.
const progressInterval = 100 * time.Millisecond

// progressBar draws a download's progress on one terminal line, redrawn in
// place, and clears the line when the download completes.
type progressBar struct {
	w    io.Writer
	now  func() time.Time
	last time.Time
}

// downloadProgress returns a progress bar on out when out is a terminal,
// and nil otherwise: piped or redirected output gets no bar.
func downloadProgress(out io.Writer) policyfetch.Progress {
	f, ok := out.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return (&progressBar{w: out, now: time.Now}).update
}

func (p *progressBar) update(done, total int64) {
	complete := total > 0 && done >= total
	now := p.now()
	if !complete && now.Sub(p.last) < progressInterval {
		return
	}
	p.last = now
	if complete {
		fmt.Fprint(p.w, "\r\033[K")
		return
	}
	fmt.Fprintf(p.w, "\r\033[K%s", renderProgress(done, total))
}

// renderProgress is the bar's text: a 30-column bar, the percentage and
// the sizes, or the size alone when the total is unknown.
func renderProgress(done, total int64) string {
	if total <= 0 {
		return "downloading " + megabytes(done)
	}
	const width = 30
	filled := int(done * width / total)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	return fmt.Sprintf("downloading [%s] %3d%% %s / %s", bar, done*100/total, megabytes(done), megabytes(total))
}

func megabytes(n int64) string {
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
