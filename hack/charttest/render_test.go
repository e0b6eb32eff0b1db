package charttest

import (
	"path"
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Paths of the chart and of the generated files it copies, relative to this
// package's directory (where go test runs).
var (
	repoRoot         = filepath.Join("..", "..")
	chartDir         = filepath.Join(repoRoot, "charts", "warden")
	generatedCRDDir  = filepath.Join(repoRoot, "config", "crd", "bases")
	reportCRDDir     = filepath.Join(repoRoot, "config", "crd", "reports")
	generatedRole    = filepath.Join(repoRoot, "config", "rbac", "role.yaml")
	chartCRDDir      = filepath.Join(chartDir, "crds")
	chartReportCRDs  = filepath.Join(chartDir, "files", "report-crds")
	chartRoleCopy    = filepath.Join(chartDir, "files", "controller-role.yaml")
	policyServerKind = "PolicyServer"
)

// customKinds are the kinds of custom resources the chart renders: they are
// decoded without a Go type and validated against their CRDs instead.
var customKinds = map[string]bool{
	policyServerKind: true,
	"ServiceMonitor": true,
	"PodMonitor":     true,
	"PrometheusRule": true,
}

// scheme knows the built-in kinds the chart may render; any other kind is a
// test failure until the test learns it.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		rbacv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strictDecoder fails on unknown and duplicate fields.
var strictDecoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// release names an installation of the chart.
type release struct {
	name, namespace string
}

// rendered is what `helm install` would send to the API server, in order.
type rendered struct {
	// objects are the release's objects, in Helm's install order.
	objects []renderedObject
	// hooks are the hook objects, in the order Helm runs them.
	hooks []renderedObject
	// notes is the rendered NOTES.txt.
	notes string
}

// renderedObject is one object of the release.
type renderedObject struct {
	template string
	kind     string
	manifest string
	// typed is the object decoded strictly into its Go type; nil for a
	// custom resource (customKinds), which is validated against its CRD
	// instead.
	typed runtime.Object
	meta  metav1.Object
}

// loadChart loads charts/warden.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading chart: %v", err)
	}
	return ch
}

// renderValues computes the values templates see for an installation of ch
// with vals as user-supplied values (as with --values), after validating
// them against values.schema.json, as helm install does.
func renderValues(ch *chart.Chart, rel release, vals map[string]any) (common.Values, error) {
	opts := common.ReleaseOptions{Name: rel.name, Namespace: rel.namespace, Revision: 1, IsInstall: true}
	return util.ToRenderValuesWithSchemaValidation(ch, vals, opts, nil, false)
}

// renderFiles renders the templates of ch: template path -> text.
func renderFiles(ch *chart.Chart, top common.Values) (map[string]string, error) {
	return engine.Render(ch, top)
}

// render renders the chart with vals as user-supplied values, the way
// `helm install` does, and decodes every object.
func render(t *testing.T, rel release, vals map[string]any) *rendered {
	t.Helper()
	ch := loadChart(t)
	top, err := renderValues(ch, rel, vals)
	if err != nil {
		t.Fatalf("computing values: %v", err)
	}
	files, err := renderFiles(ch, top)
	if err != nil {
		t.Fatalf("rendering chart: %v", err)
	}
	out := &rendered{}
	notesPath := path.Join(ch.Name(), "templates", "NOTES.txt")
	out.notes = files[notesPath]
	delete(files, notesPath)

	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		t.Fatalf("splitting manifests: %v", err)
	}
	for _, h := range hooks {
		obj, _, err := strictDecoder.Decode([]byte(h.Manifest), nil, nil)
		if err != nil {
			t.Fatalf("decoding the hook %s from %s: %v\n%s", h.Kind, h.Path, err, h.Manifest)
		}
		o := renderedObject{template: h.Path, kind: h.Kind, manifest: h.Manifest, typed: obj}
		o.meta, _ = obj.(metav1.Object)
		out.hooks = append(out.hooks, o)
	}
	for _, m := range manifests {
		o := renderedObject{template: m.Name, kind: m.Head.Kind, manifest: m.Content}
		if customKinds[m.Head.Kind] {
			u := unstructuredObject(t, m.Content)
			o.meta = &metav1.ObjectMeta{
				Name:      u.GetName(),
				Namespace: u.GetNamespace(),
				Labels:    u.GetLabels(),
			}
		} else {
			obj, _, err := strictDecoder.Decode([]byte(m.Content), nil, nil)
			if err != nil {
				t.Fatalf("decoding %s from %s: %v\n%s", m.Head.Kind, m.Name, err, m.Content)
			}
			o.typed = obj
			acc, ok := obj.(metav1.Object)
			if !ok {
				t.Fatalf("%s from %s has no object metadata", m.Head.Kind, m.Name)
			}
			o.meta = acc
		}
		out.objects = append(out.objects, o)
	}
	return out
}

// find returns the one object of kind, failing unless there is exactly one.
func (r *rendered) find(t *testing.T, kind string) renderedObject {
	t.Helper()
	var found []renderedObject
	for _, o := range r.objects {
		if o.kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered %d %s objects, want 1", len(found), kind)
	}
	return found[0]
}

// named returns the object of kind named name, decoded into T; it fails
// unless there is exactly one.
func named[T runtime.Object](t *testing.T, r *rendered, kind, name string) T {
	t.Helper()
	var found []renderedObject
	for _, o := range r.objects {
		if o.kind == kind && o.meta.GetName() == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered %d %s objects named %q, want 1", len(found), kind, name)
	}
	obj, ok := found[0].typed.(T)
	if !ok {
		t.Fatalf("%s %q decoded as %T", kind, name, found[0].typed)
	}
	return obj
}

// count returns the number of rendered objects of kind.
func (r *rendered) count(kind string) int {
	n := 0
	for _, o := range r.objects {
		if o.kind == kind {
			n++
		}
	}
	return n
}

// kinds lists the rendered kinds in install order.
func (r *rendered) kinds() []string {
	var kinds []string
	for _, o := range r.objects {
		kinds = append(kinds, o.kind)
	}
	return kinds
}

// typedObject returns the only object of kind, decoded into T.
func typedObject[T runtime.Object](t *testing.T, r *rendered, kind string) T {
	t.Helper()
	o := r.find(t, kind)
	obj, ok := o.typed.(T)
	if !ok {
		t.Fatalf("%s decoded as %T", kind, o.typed)
	}
	return obj
}

// namespaced tells whether a kind the chart renders is namespaced.
var namespaced = map[string]bool{
	"ServiceAccount":           true,
	"PersistentVolumeClaim":    true,
	"Service":                  true,
	"Deployment":               true,
	"CronJob":                  true,
	"Role":                     true,
	"RoleBinding":              true,
	"ClusterRole":              false,
	"ClusterRoleBinding":       false,
	"CustomResourceDefinition": false,
	policyServerKind:           false,
	"ConfigMap":                true,
	"ServiceMonitor":           true,
	"PodMonitor":               true,
	"PrometheusRule":           true,
}
