package wardenctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/metadata"
)

func (a *app) scaffoldCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scaffold",
		Short: "Scaffold a Kubernetes resource or a configuration file",
		Args:  args(cobra.NoArgs),
	}
	cmd.AddCommand(a.scaffoldManifestCommand(), a.scaffoldAdmissionRequestCommand(), a.scaffoldVerificationConfigCommand(), a.scaffoldVAPCommand())
	return cmd
}

// ManifestOptions are the flags of scaffold manifest.
type ManifestOptions struct {
	Remote   RemoteOptions
	Settings SettingsOptions
	// Type is ClusterAdmissionPolicy or AdmissionPolicy.
	Type string
	// Title is the resource's name; default: the policy's title annotation.
	Title string
	// AllowContextAware copies the metadata's contextAwareResources into a
	// ClusterAdmissionPolicy.
	AllowContextAware bool
}

// AddFlags registers the flags, with kwctl's names.
func (o *ManifestOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	f := cmd.Flags()
	f.StringVarP(&o.Type, "type", "t", "", "Kubewarden resource type: ClusterAdmissionPolicy or AdmissionPolicy")
	f.StringVar(&o.Title, "title", "", "Policy title: the name of the resource (default: the policy's title annotation)")
	f.StringVarP(&o.Settings.SettingsPath, "settings-path", "s", "", "File containing the settings for this policy (YAML or JSON)")
	f.StringVar(&o.Settings.SettingsJSON, "settings-json", "", "JSON string containing the settings for this policy")
	f.BoolVar(&o.AllowContextAware, "allow-context-aware", false, "Grant the policy the Kubernetes resources of its metadata (contextAwareResources)")
}

// Validate checks the flags.
func (o *ManifestOptions) Validate() error {
	switch o.Type {
	case "ClusterAdmissionPolicy", "AdmissionPolicy":
	case "":
		return &usageError{errors.New("--type is required: ClusterAdmissionPolicy or AdmissionPolicy")}
	default:
		return &usageError{fmt.Errorf("invalid --type %q: use ClusterAdmissionPolicy or AdmissionPolicy", o.Type)}
	}
	if o.Title != "" && !dns1123Subdomain.MatchString(o.Title) {
		return &usageError{fmt.Errorf("invalid --title %q: a resource name has lowercase letters, digits, '-' and '.', and starts and ends with a letter or digit", o.Title)}
	}
	return o.Settings.Validate()
}

var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// policyManifest is the resource scaffold manifest writes; field order is
// the output's.
type policyManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Module   string          `json:"module"`
		Settings json.RawMessage `json:"settings"`
		Rules    []metadata.Rule `json:"rules"`
		Mutating bool            `json:"mutating"`
		// BackgroundAudit is written only when false: true is the default.
		BackgroundAudit       *bool                       `json:"backgroundAudit,omitempty"`
		ContextAwareResources []metadata.ContextAwareKind `json:"contextAwareResources,omitempty"`
	} `json:"spec"`
}

// The annotations of the policy that the resource carries.
var manifestAnnotationKeys = []string{"io.kubewarden.policy.severity", "io.kubewarden.policy.category"}

func (a *app) scaffoldManifestCommand() *cobra.Command {
	var o ManifestOptions
	cmd := &cobra.Command{
		Use:   "manifest [flags] --type <ClusterAdmissionPolicy|AdmissionPolicy> <uri|sha-prefix|path>",
		Short: "Print a ClusterAdmissionPolicy or AdmissionPolicy for a policy, from its metadata",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			settings, err := o.Settings.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			p, err := a.fetchPolicy(ctx, o.Remote, argv[0])
			if err != nil {
				return err
			}
			m, err := policyMetadata(p)
			if err != nil {
				return err
			}
			if err := validateMetadata(m); err != nil {
				return fmt.Errorf("the metadata of %s is invalid: %w", p.URI, err)
			}
			var r policyManifest
			r.APIVersion, r.Kind = "policies.kubewarden.io/v1", o.Type
			r.Metadata.Name = o.Title
			if r.Metadata.Name == "" {
				r.Metadata.Name = m.Annotations["io.kubewarden.policy.title"]
			}
			if r.Metadata.Name == "" {
				a.logger().WarnContext(ctx, "the policy has no title: set the resource's name, or give --title")
			} else if !dns1123Subdomain.MatchString(r.Metadata.Name) {
				return fmt.Errorf("the policy's title %q is not a valid resource name: give one with --title", r.Metadata.Name)
			}
			for _, k := range manifestAnnotationKeys {
				if v, ok := m.Annotations[k]; ok {
					if r.Metadata.Annotations == nil {
						r.Metadata.Annotations = map[string]string{}
					}
					r.Metadata.Annotations[k] = v
				}
			}
			r.Spec.Module, r.Spec.Settings, r.Spec.Rules, r.Spec.Mutating = p.URI, settings, m.Rules, m.Mutating
			if r.Spec.Rules == nil {
				r.Spec.Rules = []metadata.Rule{}
			}
			if m.BackgroundAudit != nil && !*m.BackgroundAudit {
				r.Spec.BackgroundAudit = m.BackgroundAudit
			}
			if len(m.ContextAwareResources) > 0 {
				switch {
				case o.Type == "AdmissionPolicy":
					a.logger().WarnContext(ctx, "the policy reads Kubernetes resources, which an AdmissionPolicy cannot grant: use a ClusterAdmissionPolicy")
				case o.AllowContextAware:
					r.Spec.ContextAwareResources = m.ContextAwareResources
					a.logger().WarnContext(ctx, "the policy is granted the Kubernetes resources of its metadata: review contextAwareResources")
				default:
					a.logger().WarnContext(ctx, "the policy reads Kubernetes resources; contextAwareResources is left empty: review them with inspect, then fill it or use --allow-context-aware")
				}
			}
			b, err := jsonToYAML(r)
			if err != nil {
				return err
			}
			_, err = a.out.Write(b)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// AdmissionRequestOptions are the flags of scaffold admission-request.
type AdmissionRequestOptions struct {
	// Operation is CREATE (kwctl's only one), UPDATE or DELETE.
	Operation string
	// Object is the file of the object admitted (CREATE, UPDATE).
	Object string
	// OldObject is the file of the existing object (UPDATE, DELETE).
	OldObject string
}

// AddFlags registers the flags, with kwctl's names.
func (o *AdmissionRequestOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&o.Operation, "operation", "o", "", "Operation: CREATE, UPDATE or DELETE")
	f.StringVar(&o.Object, "object", "", "File containing the object being admitted (YAML or JSON)")
	f.StringVar(&o.OldObject, "old-object", "", "File containing the existing object (YAML or JSON)")
}

// Validate checks which objects the operation needs.
func (o *AdmissionRequestOptions) Validate() error {
	switch o.Operation {
	case "CREATE":
		if o.Object == "" || o.OldObject != "" {
			return &usageError{errors.New("CREATE takes --object and no --old-object")}
		}
	case "UPDATE":
		if o.Object == "" || o.OldObject == "" {
			return &usageError{errors.New("UPDATE takes --object and --old-object")}
		}
	case "DELETE":
		if o.Object != "" || o.OldObject == "" {
			return &usageError{errors.New("DELETE takes --old-object and no --object")}
		}
	case "":
		return &usageError{errors.New("--operation is required: CREATE, UPDATE or DELETE")}
	default:
		return &usageError{fmt.Errorf("invalid --operation %q: use CREATE, UPDATE or DELETE", o.Operation)}
	}
	return nil
}

func (a *app) scaffoldAdmissionRequestCommand() *cobra.Command {
	var o AdmissionRequestOptions
	cmd := &cobra.Command{
		Use:   "admission-request [flags] --operation CREATE --object <file>",
		Short: "Print an AdmissionRequest for an object",
		Long: "Print the AdmissionRequest (JSON) the API server would send a webhook for an object. " +
			"The resource name and scope come from a built-in table of common kinds; for other kinds " +
			"the plural is guessed and a warning says so.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			var obj, old json.RawMessage
			var err error
			if o.Object != "" {
				if obj, err = a.readObject(o.Object); err != nil {
					return err
				}
			}
			if o.OldObject != "" {
				if old, err = a.readObject(o.OldObject); err != nil {
					return err
				}
			}
			req, guessed, err := newAdmissionRequest(o.Operation, obj, old)
			if err != nil {
				return err
			}
			if guessed {
				a.logger().WarnContext(cmd.Context(), "unknown kind: the resource name is a guess and the namespace is the object's",
					"kind", req.Kind.Kind, "resource", req.Resource.Resource)
			}
			b, err := json.MarshalIndent(req, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "%s\n", b)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// readObject reads a file holding one Kubernetes object, YAML or JSON.
func (a *app) readObject(path string) (json.RawMessage, error) {
	doc, err := a.readInput(path)
	if err != nil {
		return nil, err
	}
	docs, err := splitDocuments(doc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("reading %s: want one object, found %d documents", path, len(docs))
	}
	return docs[0], nil
}

// verificationKeyPlaceholder stands in the template of scaffold
// verification-config where the user's public key goes; loading a config
// that still holds it says so.
const verificationKeyPlaceholder = "REPLACE-WITH-YOUR-PUBLIC-KEY"

// verificationConfigTemplate is what scaffold verification-config prints,
// with the default location of the file for %[1]s: a config Warden can
// satisfy once the placeholder is replaced. kwctl prints one that requires
// the keyless signatures of the kubewarden organization's GitHub Actions,
// which Warden verifies only against a given trust root; the header says
// so.
const verificationConfigTemplate = `# Verification config (Kubewarden's verification.yml format): the cosign
# signatures a policy must carry.
#
# Warden verifies signatures offline. Signatures made with a key pair,
# kind pubKey (and Warden's kind certificate), need nothing else. Keyless
# signatures, kinds githubAction and genericIssuer, are checked against
# the Sigstore trust root given with --sigstore-trust-config (a
# ClientTrustConfig); Warden never fetches Sigstore's public one, and
# without that flag wardenctl refuses a config that requires them. kwctl's
# default config requires the keyless signatures of the kubewarden
# organization's GitHub Actions; this one requires your key.
#
# Put your public key in place of ` + verificationKeyPlaceholder + `
# (the lines of cosign.pub, from cosign generate-key-pair; sign a pushed
# policy with cosign sign --key cosign.key, or wardenctl sign --key
# cosign.key), then save the file to
#   %[1]s
# where pull, run, bench and verify read it when no verification flag is
# given, or give it with --verification-config-path (the policy server:
# --verification-path). anyOf, with minimumMatches, lists alternatives.
apiVersion: v1
allOf:
  - kind: pubKey
    owner: my-team            # optional, informative
    key: |
      -----BEGIN PUBLIC KEY-----
      ` + verificationKeyPlaceholder + `
      -----END PUBLIC KEY-----
    # annotations:            # optional: what the signature must carry (cosign sign -a env=prod)
    #   env: prod
`

func (a *app) scaffoldVerificationConfigCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verification-config",
		Short: "Print a verification config template for key-based signatures",
		Long: "Print a verification config (Kubewarden's verification.yml format) that requires a cosign " +
			"signature made with your key pair: replace the placeholder with your public key and save it to " +
			"~/.config/kubewarden/verification-config.yml, which pull, run, bench and verify then read when no " +
			"verification flag is given. Unlike kwctl's default, it does not require keyless signatures " +
			"(githubAction, genericIssuer), which Warden checks only against --sigstore-trust-config.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(a.out, verificationConfigTemplate, a.defaultVerificationConfig())
			return err
		},
	}
}

// admissionRequest is the AdmissionRequest scaffold writes.
type admissionRequest struct {
	UID             string          `json:"uid"`
	Kind            gvk             `json:"kind"`
	Resource        gvr             `json:"resource"`
	RequestKind     gvk             `json:"requestKind"`
	RequestResource gvr             `json:"requestResource"`
	Name            string          `json:"name,omitempty"`
	Namespace       string          `json:"namespace,omitempty"`
	Operation       string          `json:"operation"`
	UserInfo        userInfo        `json:"userInfo"`
	Object          json.RawMessage `json:"object,omitempty"`
	OldObject       json.RawMessage `json:"oldObject,omitempty"`
	DryRun          bool            `json:"dryRun"`
	Options         json.RawMessage `json:"options,omitempty"`
}

type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

type gvr struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

type userInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// scaffoldUID is the uid of scaffolded requests: fixed, so that the output
// of a scaffold is stable.
const scaffoldUID = "1299d386-525b-4032-98ae-1949f69f9cfc"

// newAdmissionRequest builds the request for an operation on obj (CREATE,
// UPDATE) or old (DELETE). guessed reports a kind missing from the table.
func newAdmissionRequest(op string, obj, old json.RawMessage) (req *admissionRequest, guessed bool, err error) {
	subject := obj
	if subject == nil {
		subject = old
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(subject, &meta); err != nil {
		return nil, false, fmt.Errorf("the object is not a Kubernetes object: %w", err)
	}
	if meta.APIVersion == "" || meta.Kind == "" {
		return nil, false, errors.New("the object has no apiVersion or kind")
	}
	group, version, ok := strings.Cut(meta.APIVersion, "/")
	if !ok {
		group, version = "", meta.APIVersion
	}
	info, known := kindTable[group+"/"+meta.Kind]
	if !known {
		info = kindInfo{plural: guessPlural(meta.Kind), namespaced: meta.Metadata.Namespace != ""}
	}
	ns := meta.Metadata.Namespace
	if ns == "" && info.namespaced {
		ns = "default"
	}
	k := gvk{Group: group, Version: version, Kind: meta.Kind}
	r := gvr{Group: group, Version: version, Resource: info.plural}
	opts := map[string]string{"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[op]
	return &admissionRequest{
		UID:             scaffoldUID,
		Kind:            k,
		Resource:        r,
		RequestKind:     k,
		RequestResource: r,
		Name:            meta.Metadata.Name,
		Namespace:       ns,
		Operation:       op,
		UserInfo:        userInfo{Username: "kubernetes-admin", Groups: []string{"system:masters", "system:authenticated"}},
		Object:          obj,
		OldObject:       old,
		Options:         json.RawMessage(fmt.Sprintf(`{"apiVersion":"meta.k8s.io/v1","kind":%q}`, opts)),
	}, !known, nil
}

// kindInfo is what the API server's discovery would say of a kind.
type kindInfo struct {
	plural     string
	namespaced bool
}

// kindTable holds the common built-in kinds, by group/kind.
var kindTable = map[string]kindInfo{
	"/Pod":                                  {"pods", true},
	"/Service":                              {"services", true},
	"/ConfigMap":                            {"configmaps", true},
	"/Secret":                               {"secrets", true},
	"/ServiceAccount":                       {"serviceaccounts", true},
	"/PersistentVolumeClaim":                {"persistentvolumeclaims", true},
	"/PersistentVolume":                     {"persistentvolumes", false},
	"/Namespace":                            {"namespaces", false},
	"/Node":                                 {"nodes", false},
	"/Endpoints":                            {"endpoints", true},
	"/Event":                                {"events", true},
	"/LimitRange":                           {"limitranges", true},
	"/ResourceQuota":                        {"resourcequotas", true},
	"/ReplicationController":                {"replicationcontrollers", true},
	"apps/Deployment":                       {"deployments", true},
	"apps/StatefulSet":                      {"statefulsets", true},
	"apps/DaemonSet":                        {"daemonsets", true},
	"apps/ReplicaSet":                       {"replicasets", true},
	"batch/Job":                             {"jobs", true},
	"batch/CronJob":                         {"cronjobs", true},
	"networking.k8s.io/Ingress":             {"ingresses", true},
	"networking.k8s.io/IngressClass":        {"ingressclasses", false},
	"networking.k8s.io/NetworkPolicy":       {"networkpolicies", true},
	"rbac.authorization.k8s.io/Role":        {"roles", true},
	"rbac.authorization.k8s.io/RoleBinding": {"rolebindings", true},
	"rbac.authorization.k8s.io/ClusterRole": {"clusterroles", false},
	"rbac.authorization.k8s.io/ClusterRoleBinding":  {"clusterrolebindings", false},
	"policy/PodDisruptionBudget":                    {"poddisruptionbudgets", true},
	"autoscaling/HorizontalPodAutoscaler":           {"horizontalpodautoscalers", true},
	"storage.k8s.io/StorageClass":                   {"storageclasses", false},
	"apiextensions.k8s.io/CustomResourceDefinition": {"customresourcedefinitions", false},
	"policies.kubewarden.io/ClusterAdmissionPolicy": {"clusteradmissionpolicies", false},
	"policies.kubewarden.io/AdmissionPolicy":        {"admissionpolicies", true},
	"policies.kubewarden.io/PolicyServer":           {"policyservers", false},
}

// guessPlural guesses the resource name of a kind as English plurals go.
func guessPlural(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "y") && len(k) > 1 && !strings.ContainsRune("aeiou", rune(k[len(k)-2])):
		return k[:len(k)-1] + "ies"
	case strings.HasSuffix(k, "s"), strings.HasSuffix(k, "x"), strings.HasSuffix(k, "ch"), strings.HasSuffix(k, "sh"):
		return k + "es"
	}
	return k + "s"
}
