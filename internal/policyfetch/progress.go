package policyfetch

import "io"

// Progress is told how a download advances: done bytes of total (-1 when
// the server does not say). It is called from the downloading goroutine,
// at every read, so it must be quick; it is never called for modules read
// from the store or from a file.
type Progress func(done, total int64)

// progressReader reports the bytes read through it to report.
type progressReader struct {
	r      io.Reader
	done   int64
	total  int64
	report Progress
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.done += int64(n)
		p.report(p.done, p.total)
	}
	return n, err
}

// withProgress wraps r so that f's Progress, if any, hears of its reads.
func (f *Fetcher) withProgress(r io.Reader, total int64) io.Reader {
	if f.progress == nil {
		return r
	}
	return &progressReader{r: r, total: total, report: f.progress}
}
