package v1alpha1_test

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// TestPolicySyncCRD checks the generated CRD against the contract of
// docs/policy-sync.md: cluster-scoped, in Warden's own group, with a
// status subresource, and refusing a PolicySync with no cluster at all.
func TestPolicySyncCRD(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", "sync.wardenhq.io_policysyncs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Name != "policysyncs."+syncv1alpha1.GroupName || crd.Spec.Group != syncv1alpha1.GroupName ||
		crd.Spec.Names.Kind != syncv1alpha1.KindPolicySync || crd.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Errorf("CRD %s: group %s, kind %s, scope %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("versions: %d, want v1alpha1 only", len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != "v1alpha1" || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("version %s: served %v, storage %v, subresources %+v", v.Name, v.Served, v.Storage, v.Subresources)
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	if len(spec.XValidations) != 1 || spec.XValidations[0].Rule != "has(self.clusters) || has(self.placement)" {
		t.Errorf("spec validations %+v, want the clusters-or-placement rule", spec.XValidations)
	}
	if got := spec.Required; len(got) != 1 || got[0] != "policiesToSync" {
		t.Errorf("spec.required = %v, want [policiesToSync]", got)
	}
}
