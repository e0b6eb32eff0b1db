package clustertest

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Items returns the objects of a list, whatever its type, for a check
// that reads only their metadata (what is left in a namespace).
func Items(l client.ObjectList) ([]metav1.Object, error) {
	objs, err := meta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	items := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		acc, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		items = append(items, acc)
	}
	return items, nil
}
