package auditscanner

import "github.com/wardenhq/warden/internal/observability"

// Log keys of the audit scanner, on top of observability's.
const (
	keyError     = observability.KeyError
	keyNamespace = observability.KeyNamespace
	keyName      = observability.KeyName
	keyPolicy    = observability.KeyPolicyID
	keyResource  = observability.KeyResource

	keyRunUID         = "run_uid"
	keyReportKind     = "report_kind"
	keyPolicyKind     = "policy_kind"
	keyPolicyServer   = "policy_server"
	keyURL            = "url"
	keyDone           = "namespaces_done"
	keyTotal          = "namespaces_total"
	keyPolicies       = "policies_audited"
	keySkipped        = "policies_skipped"
	keyErrored        = "policies_errored"
	keyResources      = "resources"
	keyCreated        = "reports_created"
	keyUpdated        = "reports_updated"
	keyUnchanged      = "reports_unchanged"
	keyReused         = "reports_reused"
	keyCleaned        = "stale_reports_deleted"
	keyEvalErrors     = "evaluation_errors"
	keyIncomplete     = "incomplete"
	keyDurationMillis = "duration_ms"
)
