package policyfetch

import (
	"context"
	"io"
)

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

type progressKey struct{}

// WithProgress returns a context under which the module downloads of
// Fetch tell report how they advance, as Options.Progress does; a fetch
// shared by several callers reports to the first caller's.
func WithProgress(ctx context.Context, report Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// withProgress wraps r so that f's Progress and ctx's, if any, hear of its
// reads.
func (f *Fetcher) withProgress(ctx context.Context, r io.Reader, total int64) io.Reader {
	report, _ := ctx.Value(progressKey{}).(Progress)
	switch {
	case report != nil && f.progress != nil:
		both, own := report, f.progress
		report = func(done, total int64) {
			own(done, total)
			both(done, total)
		}
	case report == nil:
		report = f.progress
	}
	if report == nil {
		return r
	}
	return &progressReader{r: r, total: total, report: report}
}
