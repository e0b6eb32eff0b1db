package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stubGo stands in for the go command in TestBenchScriptPorts: "go build -o
// OUT" writes OUT as a stub of the binary, "go run" (hack/buildpolicy)
// prints a module path. The stubs record their arguments in $BENCH_LOG; the
// servers stay up until bench.sh stops them, the load tools print a
// throughput.
const stubGo = `#!/bin/sh
echo "go $*" >> "$BENCH_LOG"
case $1 in
build)
  cat > "$3" <<'EOF'
#!/bin/sh
echo "$(basename "$0") $*" >> "$BENCH_LOG"
case $(basename "$0") in
policy-server|floorserver) exec sleep 300 ;;
loadtest) echo "throughput 100.0 req/s" ;;
esac
EOF
  chmod +x "$3" ;;
run) echo /stub/policy.wasm ;;
esac
`

// stubCurl answers every readiness probe of bench.sh.
const stubCurl = `#!/bin/sh
echo "curl $*" >> "$BENCH_LOG"
`

// TestBenchScriptPorts runs hack/bench.sh's load and reload sections with
// stubs of go, curl and openssl, and checks that the servers, probes and
// load tools get the ports of the environment, or the defaults.
func TestBenchScriptPorts(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := filepath.Abs(filepath.Join("..", "bench.sh"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		// want are the ports in use: webhook, readiness, floor.
		want    [3]string
		notWant [3]string
	}{
		{name: "defaults", want: [3]string{"3000", "8081", "3100"}, notWant: [3]string{"4000", "9091", "4100"}},
		{name: "from the environment", env: []string{"BENCH_PORT=4000", "BENCH_READINESS_PORT=9091", "BENCH_FLOOR_PORT=4100"},
			want: [3]string{"4000", "9091", "4100"}, notWant: [3]string{"3000", "8081", "3100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			for name, body := range map[string]string{"go": stubGo, "curl": stubCurl, "openssl": "#!/bin/sh\n"} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			logFile := filepath.Join(t.TempDir(), "log")
			for _, section := range []string{"load", "reload"} {
				cmd := exec.Command(bash, script, section)
				cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
					"BENCH_LOG="+logFile, "DURATION=1s", "BENCH_PORT=", "BENCH_READINESS_PORT=", "BENCH_FLOOR_PORT=")
				cmd.Env = append(cmd.Env, tt.env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("hack/bench.sh %s: %v\n%s", section, err, out)
				}
			}
			b, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			port, readiness, floor := tt.want[0], tt.want[1], tt.want[2]
			for _, want := range []string{
				"policy-server --addr 127.0.0.1 --port " + port + " --readiness-probe-port " + readiness + " ",
				"curl -fsS -o /dev/null http://127.0.0.1:" + readiness + "/readiness",
				"floorserver -addr 127.0.0.1:" + floor + " ",
				"loadtest -url https://127.0.0.1:" + floor + "/validate/x ",
				"loadtest -url https://127.0.0.1:" + port + "/validate/labels ",
				"reloadbench -url https://127.0.0.1:" + port + " ",
			} {
				if !strings.Contains(log, want) {
					t.Errorf("no %q in what the stubs recorded:\n%s", want, log)
				}
			}
			for _, p := range tt.notWant {
				if regexp.MustCompile(`[:\s]` + p + `\b`).MatchString(log) {
					t.Errorf("port %s used:\n%s", p, log)
				}
			}
		})
	}
}
