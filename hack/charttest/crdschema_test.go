package charttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdSchema validates custom resources with a CRD's schema and CEL rules,
// the way the API server does on a create, without an API server.
type crdSchema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *schemacel.Validator
}

// newCRDSchema loads the CRD policies.kubewarden.io_<plural>.yaml from the
// chart's crds/ directory.
func newCRDSchema(t *testing.T, plural string) *crdSchema {
	t.Helper()
	return loadCRDSchema(t, filepath.Join(chartCRDDir, "policies.kubewarden.io_"+plural+".yaml"))
}

// loadCRDSchema loads the CRD in file, with one version.
func loadCRDSchema(t *testing.T, file string) *crdSchema {
	t.Helper()
	plural := filepath.Base(file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading CRD: %v", err)
	}
	var v1crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &v1crd); err != nil {
		t.Fatalf("decoding CRD %s: %v", plural, err)
	}
	// Apply the v1 defaults and convert to the internal version, as the API
	// server does before it builds the validators.
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1crd)
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &crd, nil); err != nil {
		t.Fatalf("converting CRD %s: %v", plural, err)
	}
	props := crd.Spec.Validation.OpenAPIV3Schema
	if len(crd.Spec.Versions) > 0 && crd.Spec.Versions[0].Schema != nil {
		props = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	structural, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatalf("structural schema of %s: %v", plural, err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatalf("schema validator of %s: %v", plural, err)
	}
	return &crdSchema{
		structural: structural,
		validator:  validator,
		cel:        schemacel.NewValidator(structural, true, celconfig.PerCallLimit),
	}
}

// validateCreate applies the CRD's defaults to obj and returns what the API
// server would reject on a create, fields it would prune included.
func (s *crdSchema) validateCreate(obj map[string]any) field.ErrorList {
	structuraldefaulting.Default(obj, s.structural)
	var errs field.ErrorList
	pruned := structuralpruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range pruned {
		errs = append(errs, field.Forbidden(field.NewPath(p), "unknown field: the API server would drop it"))
	}
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.validator)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// unstructuredObject decodes a YAML manifest into the generic form the API
// server validates, integers as int64.
func unstructuredObject(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatalf("decoding manifest: %v\n%s", err, manifest)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		t.Fatalf("decoding manifest: %v\n%s", err, manifest)
	}
	return &unstructured.Unstructured{Object: obj}
}
