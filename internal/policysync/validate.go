package policysync

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// policyKinds are Warden's policy kinds: their objects may be synced
// though they have no .spec.targetRef.
var policyKinds = map[string]bool{
	policiesv1.KindClusterAdmissionPolicy:      true,
	policiesv1.KindAdmissionPolicy:             true,
	policiesv1.KindClusterAdmissionPolicyGroup: true,
	policiesv1.KindAdmissionPolicyGroup:        true,
}

// resourceDiscovery is the part of the hub's discovery client the syncer
// uses (discovery.DiscoveryInterface has it).
type resourceDiscovery interface {
	// ServerResourcesForGroupVersion returns the resources the hub serves
	// in a group version.
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// gvrValidator checks the resources of a PolicySync against the hub, as
// RFC 002 says: the resource exists, the syncer may list and watch it, and
// it has the policy shape.
type gvrValidator struct {
	discovery resourceDiscovery
	// reader reads CustomResourceDefinitions without a cache; writer
	// creates SelfSubjectAccessReviews.
	reader client.Reader
	writer client.Writer
}

// validate returns why gvr cannot be synced, in words for the PolicySync's
// status, or nil.
func (v *gvrValidator) validate(ctx context.Context, gvr schema.GroupVersionResource) error {
	resources, err := v.discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("discovering %s on the hub: %w", gvr.GroupVersion(), err)
	}
	kind := ""
	if resources != nil {
		for _, r := range resources.APIResources {
			if r.Name == gvr.Resource {
				kind = r.Kind
				break
			}
		}
	}
	if kind == "" {
		return fmt.Errorf("the hub does not serve %s", displayGVR(gvr))
	}

	for _, verb := range []string{"list", "watch"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
			},
		}}
		if err := v.writer.Create(ctx, review); err != nil {
			return fmt.Errorf("checking whether the syncer may %s %s: %w", verb, displayGVR(gvr), err)
		}
		if !review.Status.Allowed {
			return fmt.Errorf("the syncer may not %s %s on the hub", verb, displayGVR(gvr))
		}
	}

	if gvr.Group == policiesv1.GroupName && policyKinds[kind] {
		return nil
	}
	hasTargetRef, err := v.hasTargetRef(ctx, gvr)
	if err != nil {
		return err
	}
	if !hasTargetRef {
		return fmt.Errorf("%s is not a policy: it is not one of Warden's policy kinds and its schema has no .spec.targetRef", displayGVR(gvr))
	}
	return nil
}

// hasTargetRef says whether the schema of gvr's version has
// .spec.targetRef. Resources that no CustomResourceDefinition defines
// (built-in or aggregated) have none that the syncer can read.
func (v *gvrValidator) hasTargetRef(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := v.reader.Get(ctx, client.ObjectKey{Name: gvr.Resource + "." + gvr.Group}, &crd); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading the CustomResourceDefinition of %s: %w", displayGVR(gvr), err)
	}
	for _, version := range crd.Spec.Versions {
		if version.Name != gvr.Version || version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
			continue
		}
		spec, ok := version.Schema.OpenAPIV3Schema.Properties["spec"]
		if !ok {
			return false, nil
		}
		_, ok = spec.Properties["targetRef"]
		return ok, nil
	}
	return false, nil
}

// displayGVR writes a resource as kubectl does: resource.version.group.
func displayGVR(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "." + gvr.Version
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}
