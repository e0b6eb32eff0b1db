//go:build cluster && scale

package scalebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The informer baseline: what a policy server with in-memory reflectors
// (Kubewarden's) does to answer a list host call, without the policy. The
// test binary runs it when informerEnv names a resource.
const (
	informerEnv     = "SCALEBENCH_INFORMER"      // the core v1 resource to serve: namespaces or pods
	informerAddrEnv = "SCALEBENCH_INFORMER_ADDR" // host:port to listen on
)

// informerMain runs a dynamic informer of the core v1 resource named by
// resource, against the API server of the kubeconfig in KUBECONFIG, and
// serves on the address in informerAddrEnv, until SIGTERM:
//
//   - GET /readiness: 200 once the informer has synced, else 503;
//   - any method on /list?namespace=NS: 503 until the informer has
//     synced, then the JSON list of the objects of NS,
//     or of all objects without namespace, as a list host call answers
//     ({"apiVersion":"v1","kind":"<Kind>List","metadata":{},"items":[...]}).
//
// The informer drops managedFields and the last-applied-configuration
// annotation as it stores objects, as Warden's reflectors do. It returns the
// exit status.
func informerMain(resource string, getenv func(string) string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveInformer(ctx, resource, getenv(informerAddrEnv), getenv("KUBECONFIG")); err != nil {
		fmt.Fprintf(stderr, "informer: %v\n", err)
		return 1
	}
	return 0
}

func serveInformer(ctx context.Context, resource, addr, kubeconfig string) error {
	listKind := map[string]string{"namespaces": "NamespaceList", "pods": "PodList"}[resource]
	if listKind == "" {
		return fmt.Errorf("resource %q: want namespaces or pods", resource)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	informer := factory.ForResource(schema.GroupVersionResource{Version: "v1", Resource: resource}).Informer()
	if err := informer.SetTransform(dropManagedFields); err != nil {
		return err
	}
	var synced atomic.Bool
	factory.Start(ctx.Done())
	go func() {
		start := time.Now()
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			synced.Store(true)
			fmt.Printf("informer: %d %s synced in %v\n", len(informer.GetStore().ListKeys()), resource, time.Since(start))
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, _ *http.Request) {
		if !synced.Load() {
			http.Error(w, "not synced", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/list", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !synced.Load() {
			http.Error(w, "not synced", http.StatusServiceUnavailable)
			return
		}
		var objs []any
		if ns := r.URL.Query().Get("namespace"); ns != "" {
			var err error
			objs, err = informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		} else {
			objs = informer.GetStore().List()
		}
		body, err := listJSON(listKind, objs)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listJSON renders objs (*unstructured.Unstructured) as a list of kind.
func listJSON(kind string, objs []any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"v1","kind":"` + kind + `","metadata":{},"items":[`)
	enc := json.NewEncoder(&b)
	for i, o := range objs {
		if i > 0 {
			b.WriteByte(',')
		}
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("the store holds a %T", o)
		}
		if err := enc.Encode(u.Object); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1) // the encoder's newline
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// dropManagedFields removes what Warden's reflectors do not store either.
func dropManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
		unstructured.RemoveNestedField(u.Object, "metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration")
	}
	return obj, nil
}
