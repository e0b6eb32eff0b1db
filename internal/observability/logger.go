package observability

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// LevelTrace is the level of Kubewarden's --log-level=trace: more verbose than
// debug. Records at this level print as TRACE.
const LevelTrace = slog.LevelDebug - 4

// Log levels and formats accepted by [ParseLevel] and [NewLogger]: the values of
// Kubewarden's --log-level and --log-fmt flags
// (docs/compatibility.md#policy-server-flags).
const (
	validLevels  = "trace, debug, info, warn, error"
	validFormats = "text, json, otlp"
)

// ParseLevel returns the slog level for a Kubewarden --log-level value: trace,
// debug, info, warn or error, in any letter case.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "trace":
		return LevelTrace, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("invalid log level %q: valid values are %s", level, validLevels)
}

// NewLogger returns a logger writing to w at the given --log-level (see
// [ParseLevel]) in the given --log-fmt:
//
//   - text: slog's key=value text format;
//   - json: one JSON object per line;
//   - otlp: text, as Kubewarden does: there, otlp adds the export of trace
//     spans over OTLP and keeps printing text logs. The spans are
//     [NewTracing]'s job.
//
// noColor is accepted for compatibility with --log-no-color; slog's handlers
// never print colour, so it changes nothing.
//
// The returned logger is safe for concurrent use; its handler serializes the
// writes to w, so w needs no locking of its own.
func NewLogger(w io.Writer, level, format string, noColor bool) (*slog.Logger, error) {
	_ = noColor
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: renameTrace}
	switch strings.ToLower(format) {
	case "text", "otlp":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("invalid log format %q: valid values are %s", format, validFormats)
}

// renameTrace prints LevelTrace as TRACE instead of slog's DEBUG-4.
func renameTrace(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if lvl, ok := a.Value.Any().(slog.Level); ok && lvl <= LevelTrace {
			a.Value = slog.StringValue("TRACE")
		}
	}
	return a
}

// Trace logs msg at [LevelTrace]. slog.Logger has no Trace method; this is the
// shorthand for logger.Log(ctx, LevelTrace, msg, args...).
func Trace(ctx context.Context, logger *slog.Logger, msg string, args ...any) {
	logger.Log(ctx, LevelTrace, msg, args...)
}
