//go:build unix

package engine

import (
	"context"
	"strings"
	"testing"
)

// TestFetchFileRefusesWhatIsNotAModuleFile checks that file:// modules are
// read as downloads are (policyfetch.ReadFile, tested there): /dev/zero
// would otherwise be read without end.
func TestFetchFileRefusesWhatIsNotAModuleFile(t *testing.T) {
	_, err := FetchFile(context.Background(), "file:///dev/zero")
	if err == nil || !strings.Contains(err.Error(), "/dev/zero is a character device: a module must be a regular file") {
		t.Fatalf("FetchFile(/dev/zero) = %v, want it refused as a character device", err)
	}
}
