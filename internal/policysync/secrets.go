package policysync

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// kubeconfigSecrets reads the kubeconfigs of the spokes reached directly
// from Secrets in the syncer's namespace, each kept by a watch of its own
// shared by the PolicySyncs that name it. A change of a Secret reconciles
// them. It is safe for concurrent use: its state is its informerSet's.
type kubeconfigSecrets struct {
	namespace string
	watches   *informerSet[string]
}

// newKubeconfigSecrets returns the Secrets of namespace read with kube,
// whose changes notify the PolicySyncs that read them.
func newKubeconfigSecrets(kube kubernetes.Interface, namespace string, notify func(user string)) *kubeconfigSecrets {
	newInformer := func(name string) cache.SharedIndexInformer {
		selector := fields.OneTermEqualSelector("metadata.name", name).String()
		secrets := kube.CoreV1().Secrets(namespace)
		// Wrapped as client-go's generated informers do: a client that
		// cannot stream a list (a fake) is listed and watched instead.
		lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.FieldSelector = selector
				return secrets.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.FieldSelector = selector
				return secrets.Watch(ctx, opts)
			},
		}, kube)
		return cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	}
	return &kubeconfigSecrets{namespace: namespace, watches: newInformerSet(newInformer, notify)}
}

// name returns the name of the Secret ref names, which must be in the
// syncer's namespace: a PolicySync may not make the syncer read Secrets
// elsewhere.
func (k *kubeconfigSecrets) name(ref syncv1alpha1.SecretKeySelector) (string, error) {
	if ref.Namespace != "" && ref.Namespace != k.namespace {
		return "", fmt.Errorf("the kubeconfig Secret %s/%s is not in the syncer's namespace %s", ref.Namespace, ref.Name, k.namespace)
	}
	return ref.Name, nil
}

// errSecretNotRead: the watch of a kubeconfig Secret has not filled its
// cache yet; its first event reconciles the PolicySync again.
var errSecretNotRead = errors.New("the kubeconfig Secret is not read yet")

// read returns the kubeconfig under key ("": kubeconfig) of the Secret
// name, which it starts watching under ctx (the leader's) for the
// PolicySync user. It reads the watch's cache: it makes no API call.
func (k *kubeconfigSecrets) read(ctx context.Context, user, name, key string) ([]byte, error) {
	w := k.watches.use(ctx, name, user)
	if key == "" {
		key = "kubeconfig"
	}
	if !w.synced {
		if w.failure != nil {
			return nil, fmt.Errorf("reading the kubeconfig Secret %s/%s: %w", k.namespace, name, w.failure)
		}
		return nil, errSecretNotRead
	}
	item, ok, _ := w.store.GetByKey(k.namespace + "/" + name)
	if !ok {
		return nil, fmt.Errorf("the kubeconfig Secret %s/%s does not exist", k.namespace, name)
	}
	data, ok := item.(*corev1.Secret).Data[key]
	if !ok {
		return nil, fmt.Errorf("the kubeconfig Secret %s/%s has no key %q", k.namespace, name, key)
	}
	return data, nil
}

// release stops the PolicySync user's use of the Secret name.
func (k *kubeconfigSecrets) release(name, user string) { k.watches.release(name, user) }

// releaseAll stops the PolicySync user's use of every Secret.
func (k *kubeconfigSecrets) releaseAll(user string) { k.watches.keepOnly(user, nil) }
