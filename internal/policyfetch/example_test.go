package policyfetch_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/wardenhq/warden/internal/policyfetch"
)

func ExampleFetcher_Fetch() {
	dir, err := os.MkdirTemp("", "policyfetch-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	module := filepath.Join(dir, "policy.wasm")
	if err := os.WriteFile(module, []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		log.Fatal(err)
	}

	f, err := policyfetch.New(policyfetch.Options{StoreDir: filepath.Join(dir, "store")})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	m, err := f.Fetch(context.Background(), "file://"+module)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Path == module, len(m.Bytes), m.Digest)

	_, err = f.Fetch(context.Background(), "http://policies.example/x.wasm")
	fmt.Println(err)
	// Output:
	// true 8 sha256:93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476
	// fetching http://policies.example/x.wasm: plain http is only allowed for insecure sources: add policies.example to insecure_sources in sources.yml
}
