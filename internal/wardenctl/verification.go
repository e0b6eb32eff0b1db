package wardenctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
)

// VerificationOptions are kwctl's verification flags: the cosign signatures
// a module must carry before pull, run, bench or verify accept it. Keys,
// keyless identities (--cert-email with --cert-oidc-issuer, --github-owner
// with --github-repo) and annotations build the requirements kwctl builds
// from them (each key and identity must have signed, each signature
// carrying every annotation); a verification.yml gives any other
// requirements. When no flag is given, the commands that take the flags
// read kwctl's default verification config,
// ~/.config/kubewarden/verification-config.yml, when it exists, as kwctl
// does. Keyless signatures are checked offline against the trust root of
// --sigstore-trust-config; without it, requirements of keyless signatures
// are refused when they are read (docs/verification.md).
type VerificationOptions struct {
	// KeyPaths are PEM public key files (-k, repeatable).
	KeyPaths []string
	// Annotations are key=value pairs every signature must carry (-a,
	// repeatable).
	Annotations []string
	// ConfigPath is a verification.yml.
	ConfigPath string
	// CertEmail and CertOIDCIssuer require a keyless signature by that
	// email address, from that OIDC issuer.
	CertEmail, CertOIDCIssuer string
	// GitHubOwner and GitHubRepo require a keyless signature made in a
	// GitHub Actions workflow of that owner (and repository).
	GitHubOwner, GitHubRepo string
	// TrustConfigPath is a Sigstore ClientTrustConfig: the Fulcio and
	// Rekor keyless signatures are checked against.
	TrustConfigPath string

	// readsDefault is set by AddFlags: a command that takes the flags
	// reads the default verification config when they ask for nothing.
	// The zero value, which commands without the flags carry, never does.
	readsDefault bool
}

// verificationConfigFile is the name of kwctl's default verification
// config, in its configuration directory (configHome/kubewarden).
const verificationConfigFile = "verification-config.yml"

// defaultVerificationConfig is kwctl's default verification config:
// $XDG_CONFIG_HOME/kubewarden/verification-config.yml, else
// ~/.config/kubewarden/verification-config.yml.
func (a *app) defaultVerificationConfig() string {
	return filepath.Join(a.configHome(), "kubewarden", verificationConfigFile)
}

// AddFlags registers the flags, with kwctl's names. The command then also
// reads the default verification config when no flag is given.
func (o *VerificationOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVarP(&o.KeyPaths, "verification-key", "k", nil, "Path to a PEM public key whose cosign signature the policy must carry (repeatable)")
	f.StringArrayVarP(&o.Annotations, "verification-annotation", "a", nil, "key=value annotation the signatures must carry (repeatable; needs -k, --cert-email or --github-owner)")
	f.StringVar(&o.ConfigPath, "verification-config-path", "", "YAML file of the signatures the policy must carry (verification.yml; default: ~/.config/kubewarden/verification-config.yml when it exists and no other verification flag is given)")
	f.StringVar(&o.CertEmail, "cert-email", "", "Email address of the keyless signature's certificate the policy must carry (needs --cert-oidc-issuer)")
	f.StringVar(&o.CertOIDCIssuer, "cert-oidc-issuer", "", "OIDC issuer of the keyless signature's certificate the policy must carry (needs --cert-email)")
	f.StringVar(&o.GitHubOwner, "github-owner", "", "GitHub owner whose GitHub Actions workflow must have signed the policy, keylessly")
	f.StringVar(&o.GitHubRepo, "github-repo", "", "GitHub repository of --github-owner whose workflow must have signed the policy")
	f.StringVar(&o.TrustConfigPath, "sigstore-trust-config", "", "JSON file of a Sigstore ClientTrustConfig: the Fulcio and Rekor keyless signatures are checked against, offline (Warden never fetches Sigstore's public trust root)")
	o.readsDefault = true
}

// fromFlags says whether flags, rather than a file, give requirements.
func (o *VerificationOptions) fromFlags() bool {
	return len(o.KeyPaths) > 0 || o.CertEmail != "" || o.GitHubOwner != ""
}

// Validate checks the flags without reading files.
func (o *VerificationOptions) Validate() error {
	if o.ConfigPath != "" && (o.fromFlags() || len(o.Annotations) > 0 || o.CertOIDCIssuer != "" || o.GitHubRepo != "") {
		return &usageError{errors.New("--verification-config-path cannot be combined with -k/--verification-key, -a/--verification-annotation, --cert-email, --cert-oidc-issuer, --github-owner or --github-repo: put the requirements in the file")}
	}
	if (o.CertEmail == "") != (o.CertOIDCIssuer == "") {
		return &usageError{errors.New("--cert-email and --cert-oidc-issuer go together")}
	}
	if o.GitHubRepo != "" && o.GitHubOwner == "" {
		return &usageError{errors.New("--github-repo needs --github-owner")}
	}
	if (o.CertEmail != "" || o.GitHubOwner != "") && o.TrustConfigPath == "" {
		return &usageError{errors.New("--cert-email and --github-owner require keyless signatures, which are checked against a Sigstore trust root: give --sigstore-trust-config, a Sigstore ClientTrustConfig (Warden never fetches Sigstore's public one)")}
	}
	if len(o.Annotations) > 0 && !o.fromFlags() {
		return &usageError{errors.New("-a/--verification-annotation needs at least one -k/--verification-key, --cert-email or --github-owner")}
	}
	_, err := parseAnnotations(o.Annotations, "-a/--verification-annotation")
	return err
}

// verificationConfig loads the requirements of o, as kwctl does: those of
// the -k, --cert-email, --github-owner and -a flags, else the
// --verification-config-path file, else, for a command that takes the
// flags, the default verification config when it exists. nil when there
// are none.
func (a *app) verificationConfig(o VerificationOptions) (*verify.Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.ConfigPath != "" {
		return a.loadVerificationConfig(o, o.ConfigPath, "verification config "+o.ConfigPath)
	}
	if !o.fromFlags() {
		if !o.readsDefault {
			return nil, nil
		}
		def := a.defaultVerificationConfig()
		if _, err := os.Stat(def); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		a.logger().Info("no verification flag given: using the default verification config", "path", def)
		return a.loadVerificationConfig(o, def, "the default verification config "+def)
	}
	ann, _ := parseAnnotations(o.Annotations, "") // checked by Validate
	keys := make([]string, 0, len(o.KeyPaths))
	for _, p := range o.KeyPaths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading the verification key: %w", err)
		}
		// Check each key alone, so that an error names its file.
		if _, err := verify.KeyConfig([]string{string(b)}, nil); err != nil {
			return nil, fmt.Errorf("verification key %s: %w", p, err)
		}
		keys = append(keys, string(b))
	}
	cfg := &verify.Config{}
	for _, k := range keys {
		cfg.AllOf = append(cfg.AllOf, verify.Signature{Kind: verify.KindPubKey, Key: k, Annotations: ann})
	}
	if o.CertEmail != "" {
		cfg.AllOf = append(cfg.AllOf, verify.Signature{Kind: verify.KindGenericIssuer, Issuer: o.CertOIDCIssuer,
			Subject: &verify.Subject{Equal: o.CertEmail}, Annotations: ann})
	}
	if o.GitHubOwner != "" {
		cfg.AllOf = append(cfg.AllOf, verify.Signature{Kind: verify.KindGitHubAction, Owner: o.GitHubOwner, Repo: o.GitHubRepo, Annotations: ann})
	}
	return cfg, nil
}

// loadVerificationConfig reads the verification.yml at path; name is what
// errors call it. A config that Warden can never satisfy, because it needs
// keyless signatures or Rekor bundles, is refused now, before any module is
// fetched; requirements of anyOf that Warden cannot meet, while enough
// others can, are warned about.
func (a *app) loadVerificationConfig(o VerificationOptions, path, name string) (*verify.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cfg, err := verify.ParseConfig(b)
	if err != nil {
		if strings.Contains(string(b), verificationKeyPlaceholder) {
			return nil, fmt.Errorf("%s: %w (the key is still the placeholder of wardenctl scaffold verification-config: put the lines of your public key, such as cosign.pub, in its place)", name, err)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if o.TrustConfigPath != "" {
		return cfg, nil
	}
	ignored, err := checkOffline(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, s := range ignored {
		a.logger().Warn("this requirement of anyOf can never be met without --sigstore-trust-config; the others must meet minimumMatches",
			"path", path, "requirement", s)
	}
	return cfg, nil
}

// keyBasedSigning is what errors about keyless requirements advise.
const keyBasedSigning = "give --sigstore-trust-config, a Sigstore ClientTrustConfig (Warden never fetches Sigstore's public trust root), or sign policies with a key (cosign sign --key, or wardenctl sign --key) and require them with kind pubKey; wardenctl scaffold verification-config prints a template"

// offlineProblem says why Warden cannot meet s without a Sigstore trust
// root, or "" when it can: keyless kinds need Fulcio's and Rekor's keys,
// and a Rekor bundle needs Rekor's.
func offlineProblem(s verify.Signature) string {
	switch {
	case s.Kind == verify.KindGitHubAction || s.Kind == verify.KindGenericIssuer:
		return fmt.Sprintf("requires a keyless signature (kind %s), which needs a Sigstore trust root: Fulcio's certificate authority and Rekor's key", s.Kind)
	case s.Kind == verify.KindCertificate && s.RequireRekorBundle:
		return "requires a Rekor bundle (kind certificate, requireRekorBundle: true), which needs a Sigstore trust root: Rekor's key"
	}
	return ""
}

// checkOffline refuses a config that Warden can never satisfy without a
// Sigstore trust root: an allOf requirement it cannot meet, or an anyOf of
// which it can meet fewer than minimumMatches requirements. It returns the
// anyOf requirements it cannot meet when enough others can.
func checkOffline(cfg *verify.Config) (ignored []string, err error) {
	for i, s := range cfg.AllOf {
		if p := offlineProblem(s); p != "" {
			return nil, fmt.Errorf("allOf[%d] %s: %s", i, p, keyBasedSigning)
		}
	}
	if cfg.AnyOf == nil {
		return nil, nil
	}
	var problems []string
	for i, s := range cfg.AnyOf.Signatures {
		if p := offlineProblem(s); p != "" {
			problems = append(problems, fmt.Sprintf("anyOf.signatures[%d] %s", i, p))
		}
	}
	if met := len(cfg.AnyOf.Signatures) - len(problems); met < cfg.AnyOf.MinimumMatches {
		return nil, fmt.Errorf("anyOf: without a Sigstore trust root, Warden can meet %d of its signatures, fewer than minimumMatches %d (%s): %s",
			met, cfg.AnyOf.MinimumMatches, strings.Join(problems, "; "), keyBasedSigning)
	}
	return problems, nil
}

// verifier returns the Verifier of o (see verificationConfig); nil when it
// asks for no verification.
func (a *app) verifier(o VerificationOptions) (*verify.Verifier, error) {
	cfg, err := a.verificationConfig(o)
	if err != nil || cfg == nil {
		return nil, err
	}
	var opts []verify.Option
	if o.TrustConfigPath != "" {
		tr, err := verify.LoadTrustConfig(o.TrustConfigPath)
		if err != nil {
			return nil, err
		}
		opts = append(opts, verify.WithTrustRoot(tr))
	}
	return verify.New(cfg, opts...)
}

// notValidated words a fetch error that is a refused verification as
// kwctl does, naming the policy (pull and run: "Policy <uri> cannot be
// validated"); other errors are returned as they are.
func notValidated(uri string, err error) error {
	var ve *policyfetch.VerificationError
	if errors.As(err, &ve) {
		return fmt.Errorf("policy %s cannot be validated: %w", uri, ve)
	}
	return err
}

// parseAnnotations parses key=value pairs; flag names the flag in errors.
func parseAnnotations(pairs []string, flag string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, &usageError{fmt.Errorf("%s %q: want key=value", flag, p)}
		}
		if _, dup := out[k]; dup {
			return nil, &usageError{fmt.Errorf("%s: the annotation %q is given twice", flag, k)}
		}
		out[k] = v
	}
	return out, nil
}

// VerifyOptions are the flags of verify.
type VerifyOptions struct {
	Remote RemoteOptions
}

// AddFlags registers the flags, with kwctl's names.
func (o *VerifyOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	o.Remote.Verification.AddFlags(cmd)
}

// Validate checks the flags. Without any, verify needs the default
// verification config, which the command looks for.
func (o *VerifyOptions) Validate() error {
	return o.Remote.Verification.Validate()
}

func (a *app) verifyCommand() *cobra.Command {
	var o VerifyOptions
	cmd := &cobra.Command{
		Use:   "verify [flags] <uri>",
		Short: "Check the cosign signatures of a policy in a registry",
		Long: "Check, without pulling it, that a policy in an OCI registry (registry://host/repo:tag or " +
			"@sha256:..., or host/repo:tag) carries the cosign signatures the verification flags require: " +
			"one by each -k public key and keyless ones by --cert-email/--cert-oidc-issuer or --github-owner/--github-repo, " +
			"each with every -a annotation, or those of a verification.yml " +
			"(--verification-config-path; without any of these flags, ~/.config/kubewarden/verification-config.yml). " +
			"Keyless signatures (Fulcio certificate and Rekor entry, or a Sigstore bundle attached as a referrer) are " +
			"checked offline against --sigstore-trust-config. " +
			"Exits 1 when it does not.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			v, err := a.verifier(o.Remote.Verification)
			if err != nil {
				return err
			}
			if v == nil {
				return &usageError{fmt.Errorf("nothing to verify against: give -k/--verification-key, --cert-email, --github-owner or --verification-config-path, or write a verification config to %s (wardenctl scaffold verification-config)", a.defaultVerificationConfig())}
			}
			remote := o.Remote
			remote.Verification = VerificationOptions{} // Verify checks; the fetcher only reads
			f, err := a.fetcher(remote, a.storeDir())
			if err != nil {
				return err
			}
			defer f.Close()
			res, err := v.Verify(cmd.Context(), f, argv[0])
			if err != nil {
				return err
			}
			n := len(res.Satisfied)
			plural := "s"
			if n == 1 {
				plural = ""
			}
			_, err = fmt.Fprintf(a.out, "%s verified: manifest %s, %d signature requirement%s satisfied\n", res.URI, res.ManifestDigest, n, plural)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// SignOptions are the flags of sign.
type SignOptions struct {
	Remote RemoteOptions
	// KeyPath is the private key: a cosign.key, or an unencrypted PKCS#8,
	// SEC 1 or PKCS#1 PEM key.
	KeyPath string
	// Annotations are key=value pairs the signature carries.
	Annotations []string
	// KeyPasswordEnv names the environment variable holding the password of
	// an encrypted cosign key.
	KeyPasswordEnv string
}

// AddFlags registers the flags; sign is a Warden extension, its flags take
// cosign sign's names.
func (o *SignOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	o.Remote.AddFlags(cmd)
	f.StringVar(&o.KeyPath, "key", "", "Private key file (cosign.key, or an unencrypted PEM key) (required)")
	f.StringArrayVarP(&o.Annotations, "annotations", "a", nil, "key=value annotation the signature carries (repeatable)")
	f.StringVar(&o.KeyPasswordEnv, "key-password-env", "COSIGN_PASSWORD", "Environment variable holding the password of an encrypted cosign key (unset: empty password)")
}

// Validate checks the flags.
func (o *SignOptions) Validate() error {
	if o.KeyPath == "" {
		return &usageError{errors.New("--key is required")}
	}
	_, err := parseAnnotations(o.Annotations, "-a/--annotations")
	return err
}

func (a *app) signCommand() *cobra.Command {
	var o SignOptions
	cmd := &cobra.Command{
		Use:   "sign [flags] --key <cosign.key> <uri>",
		Short: "Sign a policy in a registry with a cosign key (Warden extension)",
		Long: "Sign a policy pushed to an OCI registry (registry://host/repo:tag or @sha256:..., or " +
			"host/repo:tag) as cosign sign --key does: the signature goes beside the module, in the " +
			"image tagged sha256-<digest>.sig, next to the signatures already there. -a annotations " +
			"are signed with it; verify -a and verification.yml's annotations check them. An " +
			"encrypted cosign.key is opened with the password in $COSIGN_PASSWORD (--key-password-env).",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ann, _ := parseAnnotations(o.Annotations, "")
			pemBytes, err := os.ReadFile(o.KeyPath)
			if err != nil {
				return fmt.Errorf("reading the signing key: %w", err)
			}
			var password []byte
			if o.KeyPasswordEnv != "" {
				password = []byte(a.getenv(o.KeyPasswordEnv))
			}
			key, err := verify.LoadPrivateKey(pemBytes, password)
			if err != nil {
				return fmt.Errorf("%s: %w", o.KeyPath, err)
			}
			f, err := a.fetcher(o.Remote, a.storeDir())
			if err != nil {
				return err
			}
			defer f.Close()
			s, err := verify.Sign(cmd.Context(), f, argv[0], key, verify.SignOptions{Annotations: ann})
			if err != nil {
				return err
			}
			if s.AlreadySigned {
				_, err = fmt.Fprintf(a.out, "%s (manifest %s) already carries this signature, in %s\n", argv[0], s.ManifestDigest, s.SignatureRef)
				return err
			}
			_, err = fmt.Fprintf(a.out, "%s signed: manifest %s, signature in %s (%s)\n", argv[0], s.ManifestDigest, s.SignatureRef, s.SignatureDigest)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}
