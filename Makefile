# Warden's generated files: deepcopy functions, CustomResourceDefinitions and
# the controller's RBAC role, all produced by controller-gen from the markers
# in api/policies/v1 and internal/controller.
#
#   make generate          rewrite the generated files
#   make verify-generate   fail, with a diff, when they are out of date
#
# controller-gen is built from the Go module proxy at the pinned version (go
# run caches the binary); the main go.mod does not depend on it.

CONTROLLER_TOOLS_VERSION := v0.21.0
CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

# Output directories. hack/verify-generate.sh points them at a scratch
# directory. DEEPCOPY_DIR is a directory standing for api/: each API
# package's zz_generated.deepcopy.go goes under it at the package's path
# below api/; empty writes each next to its types.
CRD_DIR ?= config/crd/bases
RBAC_DIR ?= config/rbac
DEEPCOPY_DIR ?=

# The API packages, below api/, each with its own deepcopy file.
API_PACKAGES := policies/v1 sync/v1alpha1

# Name of the ClusterRole in config/rbac/role.yaml.
RBAC_ROLE_NAME := warden-controller

.PHONY: generate
generate:
	mkdir -p $(CRD_DIR) $(RBAC_DIR)
	rm -f $(CRD_DIR)/*.yaml
	$(foreach pkg,$(API_PACKAGES),$(CONTROLLER_GEN) object $(if $(DEEPCOPY_DIR),output:object:dir=$(DEEPCOPY_DIR)/$(pkg)) paths=./api/$(pkg) &&) true
	$(CONTROLLER_GEN) \
		crd output:crd:dir=$(CRD_DIR) \
		rbac:roleName=$(RBAC_ROLE_NAME) output:rbac:dir=$(RBAC_DIR) \
		paths=./api/... paths=./internal/controller/...

.PHONY: verify-generate
verify-generate:
	hack/verify-generate.sh
