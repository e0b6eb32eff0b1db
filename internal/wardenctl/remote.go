package wardenctl

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/policyfetch"
)

// RemoteOptions are the flags of the commands that reach registries and web
// servers.
type RemoteOptions struct {
	// SourcesPath is a sources.yml; empty means
	// ~/.config/kubewarden/sources.yaml when it exists, as in kwctl.
	SourcesPath string
	// DockerConfigJSONPath is the directory of Docker's config.json (or the
	// file); empty means $DOCKER_CONFIG, else ~/.docker.
	DockerConfigJSONPath string
	// Verification, when it asks for signatures, makes the fetcher refuse
	// every module whose cosign signatures do not meet it (and every module
	// that is not in a registry). Only the commands that register its flags
	// (pull, run, bench) fill it.
	Verification VerificationOptions
}

// AddFlags registers the flags, with kwctl's names.
func (o *RemoteOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.SourcesPath, "sources-path", "", "YAML file holding source information (https, registry insecure hosts, custom CAs...)")
	cmd.Flags().StringVar(&o.DockerConfigJSONPath, "docker-config-json-path", "", "Path to a directory containing the Docker 'config.json' file (registry credentials)")
}

// sources loads sources.yml: the --sources-path file, else kwctl's default
// file when it exists, else none.
func (a *app) sources(o RemoteOptions) (*policyfetch.Sources, error) {
	path := o.SourcesPath
	if path == "" {
		def := filepath.Join(a.configHome(), "kubewarden", "sources.yaml")
		if _, err := os.Stat(def); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		path = def
	}
	return policyfetch.LoadSources(path)
}

// dockerConfig returns the Docker config path to use.
func (a *app) dockerConfig(o RemoteOptions) string {
	if o.DockerConfigJSONPath != "" {
		return o.DockerConfigJSONPath
	}
	if d := a.getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	return filepath.Join(a.home(), ".docker")
}

// fetcher returns a fetcher for the store at storeDir.
func (a *app) fetcher(o RemoteOptions, storeDir string) (*policyfetch.Fetcher, error) {
	src, err := a.sources(o)
	if err != nil {
		return nil, err
	}
	v, err := a.verifier(o.Verification)
	if err != nil {
		return nil, err
	}
	opts := policyfetch.Options{
		StoreDir:         storeDir,
		Sources:          src,
		DockerConfigPath: a.dockerConfig(o),
		Logger:           a.logger(),
		Progress:         downloadProgress(a.out),
	}
	if v != nil { // never a typed nil in the interface
		opts.Verifier = v
	}
	return policyfetch.New(opts)
}
