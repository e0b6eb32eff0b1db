package wasm

import "testing"

// TestOPASnapshotsWantADocumentParsedTwice pins when a document is wanted
// (remembered by the next instance put back): when it is parsed while
// another instance parses it or has loaded it, however the parses
// interleave, and never for a policy that parses each document once.
func TestOPASnapshotsWantADocumentParsedTwice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parses func(s *opaSnapshots)
		want   bool
	}{
		{"one parse", func(s *opaSnapshots) { s.parsing(1)(true) }, false},
		{"serial parses of new documents", func(s *opaSnapshots) {
			s.parsing(1)(true)
			s.parsing(2)(true)
		}, false},
		{"a second parse after the first", func(s *opaSnapshots) {
			s.parsing(1)(true)
			s.parsing(1)(true)
		}, true},
		// Every evaluation of a new document starts its parse before any
		// has ended: none has loaded it yet.
		{"parses at the same time", func(s *opaSnapshots) {
			first, second := s.parsing(1), s.parsing(1)
			second(true)
			first(true)
		}, true},
		{"a parse after one that failed", func(s *opaSnapshots) {
			s.parsing(1)(false)
			s.parsing(1)(true)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s opaSnapshots
			tc.parses(&s)
			if got := s.start(1) != nil || s.start(2) != nil; got != tc.want {
				t.Errorf("an instance is remembered: %v, want %v", got, tc.want)
			}
			if len(s.inParse) != 0 {
				t.Errorf("parses in flight after they ended: %v", s.inParse)
			}
		})
	}
}
