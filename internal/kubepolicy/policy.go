package kubepolicy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"
	"unsafe"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// Options are what a Policy needs from the world beyond its settings.
type Options struct {
	// Namespace answers the namespaces the settings do not hold, for
	// namespaceSelector and namespaceObject. Nil: only the settings'
	// namespaces exist.
	Namespace NamespaceFunc

	// Authorizer answers the policy's authorizer checks. Nil: every check
	// has no opinion, which CEL's authorizer reads as not allowed.
	Authorizer authorizer.Authorizer
}

// Policy is one ValidatingAdmissionPolicy or MutatingAdmissionPolicy with
// its bindings and params, loaded into the API server's admission plugin.
// Review may be called from many goroutines at once; Close ends it.
type Policy struct {
	kind   string
	name   string
	stop   chan struct{}
	once   sync.Once
	ifaces admission.ObjectInterfaces
	// factory runs the plugin's informers; nil before start.
	factory informers.SharedInformerFactory

	// Exactly one of validate and mutate is set.
	validate admission.ValidationInterface
	mutate   admission.MutationInterface
	handles  func(admission.Operation) bool
}

// Load reads builtin://vap or builtin://map settings:
//
//	{"policy": <VAP or MAP>, "bindings": [<bindings>], "params": [<param objects>], "namespaces": [<Namespaces>]}
//
// It refuses a policy or a binding the API server would refuse to create,
// with the API server's message, and returns a Policy whose plugin has
// read every object.
func Load(settings []byte, opts Options) (*Policy, error) {
	m, err := decodeSettings(settings)
	if err != nil {
		return nil, err
	}
	m.setDefaults()
	if opts.Authorizer == nil {
		opts.Authorizer = noOpinion{}
	}
	if m.vap != nil {
		return loadVAP(m, opts)
	}
	return loadMAP(m, opts)
}

func loadVAP(m *manifests, opts Options) (*Policy, error) {
	if err := validateVAP(m.vap); err != nil {
		return nil, err
	}
	objects := []runtime.Object{m.vap}
	for _, b := range m.vapBindings {
		if err := validateVAPBinding(b); err != nil {
			return nil, err
		}
		objects = append(objects, b)
	}
	s, err := newStore(m, objects, opts.Namespace)
	if err != nil {
		return nil, err
	}
	plugin, err := validating.NewPlugin(nil)
	if err != nil {
		return nil, err
	}
	p := newPolicy(KindVAP, m.vap.Name)
	p.validate, p.handles = plugin, plugin.Handles
	// The informers validating.NewPlugin's policy source takes.
	sources := func(f informers.SharedInformerFactory) (policies, bindings cache.SharedIndexInformer) {
		return f.Admissionregistration().V1().ValidatingAdmissionPolicies().Informer(),
			f.Admissionregistration().V1().ValidatingAdmissionPolicyBindings().Informer()
	}
	if err := p.start(plugin, plugin.Handler, sources, s, opts); err != nil {
		return nil, err
	}
	return p, nil
}

func newPolicy(kind, name string) *Policy {
	return &Policy{
		kind:   kind,
		name:   name,
		stop:   make(chan struct{}),
		ifaces: admission.NewObjectInterfacesFromScheme(scheme.Scheme),
	}
}

// Is reports whether the policy is of kind, KindVAP or KindMAP.
func (p *Policy) Is(kind string) bool { return p.kind == kind }

// pluginSetters are the admission initializers kube-apiserver calls on the
// validating and mutating policy plugins, and the two calls that start
// them; both plugins have them all.
type pluginSetters interface {
	SetExternalKubeInformerFactory(informers.SharedInformerFactory)
	SetExternalKubeClientSet(kubernetes.Interface)
	SetDynamicClient(dynamic.Interface)
	SetRESTMapper(meta.RESTMapper)
	SetAuthorizer(authorizer.Authorizer)
	SetDrainedNotification(<-chan struct{})
	ValidateInitialization() error
	WaitForReady() bool
}

// start initialises plugin as kube-apiserver's admission initializers do,
// starts its informers on s and waits until it has read every object.
// handler is the plugin's; sources returns the informers of its policy
// source, the policies and their bindings.
//
// The plugin's own waits poll every 100 ms: its policy source polls until
// its informers have synced, and WaitForReady until the source has compiled
// the policies. For one policy from a store in memory that is 200 ms of
// sleep for a millisecond of work, on every start and reload of a policy.
// So the informers are synced before the source starts, and the readiness
// WaitForReady polls is polled here every millisecond (readyFunc).
func (p *Policy) start(plugin pluginSetters, handler *admission.Handler,
	sources func(informers.SharedInformerFactory) (policies, bindings cache.SharedIndexInformer), s *store, opts Options) error {
	factory := informers.NewSharedInformerFactory(s.client, 0)
	p.factory = factory
	plugin.SetExternalKubeInformerFactory(factory)
	plugin.SetExternalKubeClientSet(s.client)
	plugin.SetDynamicClient(s.dynamic)
	plugin.SetRESTMapper(s.mapper)
	plugin.SetAuthorizer(opts.Authorizer)
	plugin.SetDrainedNotification(p.stop)
	// The same informers the plugin takes from the factory.
	policies, bindings := sources(factory)
	synced := []cache.SharedIndexInformer{policies, bindings, factory.Core().V1().Namespaces().Informer()}
	factory.Start(p.stop)
	if !pollFast(func() bool { return allSynced(synced) }) {
		p.Close()
		return errNotReady
	}
	if err := plugin.ValidateInitialization(); err != nil {
		p.Close()
		return fmt.Errorf("initialising the admission plugin: %w", err)
	}
	factory.Start(p.stop) // any informer the plugin added
	ready := plugin.WaitForReady
	if f := readyFunc(handler); f != nil {
		ready = func() bool { return pollFast(f) }
	}
	if !ready() {
		p.Close()
		return errNotReady
	}
	return nil
}

var errNotReady = errors.New("the admission plugin did not read its policies in time")

// readyTimeout bounds the wait for a plugin to read its policies, as
// kube-apiserver's WaitForReady does.
const readyTimeout = 10 * time.Second

// pollFast reports whether cond holds within readyTimeout, checked every
// millisecond.
func pollFast(cond func() bool) bool {
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, readyTimeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	return err == nil
}

func allSynced(informers []cache.SharedIndexInformer) bool {
	for _, inf := range informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// readyFunc returns the readiness the plugin's ValidateInitialization set
// on h, the function h.WaitForReady polls every 100 ms, or nil when
// admission.Handler does not hold it as k8s.io/apiserver 0.36 does (a
// readyFunc field of type admission.ReadyFunc); then the caller falls back
// to WaitForReady. The Handler offers no other way to ask whether the
// plugin is ready without the wait.
func readyFunc(h *admission.Handler) admission.ReadyFunc {
	f := reflect.ValueOf(h).Elem().FieldByName("readyFunc")
	if !f.IsValid() || f.Type() != reflect.TypeFor[admission.ReadyFunc]() {
		return nil
	}
	return *(*admission.ReadyFunc)(unsafe.Pointer(f.UnsafeAddr()))
}

// Close stops the plugin's informers and waits for them to end. Reviews
// after Close are not answered reliably.
func (p *Policy) Close() {
	p.once.Do(func() {
		close(p.stop)
		if p.factory != nil {
			p.factory.Shutdown()
		}
	})
}

// Review answers req as the API server's plugin answers the request it
// stands for: allowed, or denied with the API server's status (message,
// reason, code); the warnings of bindings with validationActions Warn; the
// audit annotations the API server would write in its audit log; for a
// MutatingAdmissionPolicy, a JSONPatch from the request's object to the
// mutated one. A request the policy or no binding matches is allowed. The
// error is for a request that cannot be read, never for a denial.
func (p *Policy) Review(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	e, err := p.Evaluate(ctx, req)
	if err != nil {
		return nil, err
	}
	return e.Response, nil
}

// Evaluation is Review's answer with the object a MutatingAdmissionPolicy
// made of the request's.
type Evaluation struct {
	Response *admissionv1.AdmissionResponse
	// Object is the mutated object, JSON, when the policy changed it;
	// the Response's Patch leads from the request's object to it.
	Object []byte
}

// Evaluate is Review, with the mutated object.
func (p *Policy) Evaluate(ctx context.Context, req *admissionv1.AdmissionRequest) (*Evaluation, error) {
	attrs, err := p.attributes(req)
	if err != nil {
		return nil, err
	}
	e := &Evaluation{Response: &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}}
	if !p.handles(attrs.GetOperation()) {
		return e, nil
	}
	var warnings warningRecorder
	ctx = warning.WithWarningRecorder(ctx, &warnings)
	var original runtime.Object
	if p.mutate != nil && attrs.GetObject() != nil {
		original = attrs.GetObject().DeepCopyObject()
	}
	if p.validate != nil {
		err = p.validate.Validate(ctx, attrs, p.ifaces)
	} else {
		err = p.mutate.Admit(ctx, attrs, p.ifaces)
	}
	resp := e.Response
	resp.Warnings = warnings.texts
	resp.AuditAnnotations = attrs.annotations()
	if err != nil {
		resp.Allowed = false
		resp.Result = status(err)
		return e, nil
	}
	if original != nil {
		patch, mutated, err := jsonPatch(original, attrs.GetObject())
		if err != nil {
			return nil, err
		}
		if len(patch) > 0 {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType, e.Object = patch, &pt, mutated
		}
	}
	return e, nil
}

// status is the Status the API server answers a client for err: the
// plugin's own for a StatusError (Failure, 500 when it has no code);
// otherwise a 500 with the error's text, as the API server's handlers
// convert any other error.
func status(err error) *metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		st := se.Status()
		if st.Status == "" {
			st.Status = metav1.StatusFailure
		}
		if st.Code == 0 {
			st.Code = http.StatusInternalServerError
		}
		st.Kind, st.APIVersion = "Status", "v1"
		return &st
	}
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     http.StatusInternalServerError,
		Reason:   metav1.StatusReasonUnknown,
		Message:  err.Error(),
	}
}

// attributes are the admission attributes the API server would give the
// plugin for req, with the objects unstructured.
func (p *Policy) attributes(req *admissionv1.AdmissionRequest) (*attributes, error) {
	if req == nil {
		return nil, errors.New("no admission request")
	}
	kind := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	obj, err := objectOf(req.Object.Raw, kind)
	if err != nil {
		return nil, fmt.Errorf("decoding the request's object: %w", err)
	}
	old, err := objectOf(req.OldObject.Raw, kind)
	if err != nil {
		return nil, fmt.Errorf("decoding the request's oldObject: %w", err)
	}
	var options runtime.Object
	if len(req.Options.Raw) > 0 {
		if options, err = objectOf(req.Options.Raw, schema.GroupVersionKind{}); err != nil {
			return nil, fmt.Errorf("decoding the request's options: %w", err)
		}
	}
	u := &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups}
	if len(req.UserInfo.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range req.UserInfo.Extra {
			u.Extra[k] = v
		}
	}
	dryRun := req.DryRun != nil && *req.DryRun
	resource := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	return &attributes{Attributes: admission.NewAttributesRecord(obj, old, kind, req.Namespace, req.Name, resource, req.SubResource,
		admission.Operation(req.Operation), options, dryRun, u)}, nil
}

// attributes are the API server's attributes record, keeping a copy of the
// audit annotations the plugin adds (the record's own are read only by the
// API server's audit layer).
type attributes struct {
	admission.Attributes
	mu    sync.Mutex
	added map[string]string
}

func (a *attributes) AddAnnotation(key, value string) error {
	return a.AddAnnotationWithLevel(key, value, auditinternal.LevelMetadata)
}

func (a *attributes) AddAnnotationWithLevel(key, value string, level auditinternal.Level) error {
	if err := a.Attributes.AddAnnotationWithLevel(key, value, level); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.added == nil {
		a.added = map[string]string{}
	}
	a.added[key] = value
	return nil
}

func (a *attributes) annotations() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.added
}

// warningRecorder keeps the warnings the plugin adds, in order, without
// duplicates, as the API server's recorder does.
type warningRecorder struct {
	mu    sync.Mutex
	texts []string
}

func (w *warningRecorder) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.texts {
		if t == text {
			return
		}
	}
	w.texts = append(w.texts, text)
}

// noOpinion is the authorizer of a Policy given none.
type noOpinion struct{}

func (noOpinion) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "Warden was given no authorizer", nil
}
