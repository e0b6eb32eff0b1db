package celpolicy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Settings is cel-policy's settings shape: ValidatingAdmissionPolicy's
// variables and validations, its failurePolicy, and the paramKind and
// paramRef of a policy binding. The field types follow cel-policy's, so that
// a settings document that does not decode gets cel-policy's error. It is a
// plain value; Compile decodes its own.
type Settings struct {
	Variables     []Variable   `json:"variables"`
	Validations   []Validation `json:"validations"`
	FailurePolicy string       `json:"failurePolicy,omitempty"`
	ParamKind     *ParamKind   `json:"paramKind,omitempty"`
	ParamRef      *ParamRef    `json:"paramRef,omitempty"`
}

// Variable is a named expression that other expressions read as
// variables.<name>.
type Variable struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

// Validation is a boolean expression that must hold, with what to answer when
// it does not.
type Validation struct {
	Expression        string `json:"expression"`
	Message           string `json:"message"`
	MessageExpression string `json:"messageExpression"`
	Reason            string `json:"reason"`
}

// ParamKind is the kind of the parameter resource. Its fields have no JSON
// tags, as in Kubernetes' internal type, so names match case-insensitively.
type ParamKind struct {
	APIVersion string
	Kind       string
}

// ParamRef finds the parameter resources. Its fields have no JSON tags, as in
// Kubernetes' internal type.
type ParamRef struct {
	Name                    string
	Namespace               string
	Selector                *LabelSelector
	ParameterNotFoundAction *string
}

// LabelSelector is a Kubernetes label selector.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one requirement of a LabelSelector.
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Defaults cel-policy applies while decoding.
const (
	failurePolicyFail   = "Fail"
	failurePolicyIgnore = "Ignore"
	reasonInvalid       = "Invalid"

	parameterNotFoundAllow = "Allow"
	parameterNotFoundDeny  = "Deny"
)

// reasonCodes maps each reason a validation may give to the HTTP code of the
// rejection.
var reasonCodes = map[string]int32{
	"Unauthorized":          401,
	"Forbidden":             403,
	reasonInvalid:           400,
	"RequestEntityTooLarge": 413,
}

// UnmarshalJSON decodes settings and defaults failurePolicy to Fail.
func (s *Settings) UnmarshalJSON(data []byte) error {
	type Alias Settings
	aux := &struct{ *Alias }{Alias: (*Alias)(s)}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	if s.FailurePolicy == "" {
		s.FailurePolicy = failurePolicyFail
	}
	return nil
}

// UnmarshalJSON decodes a validation and defaults its reason to Invalid.
func (v *Validation) UnmarshalJSON(data []byte) error {
	type Alias Validation
	aux := &struct{ *Alias }{Alias: (*Alias)(v)}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	if v.Reason == "" {
		v.Reason = reasonInvalid
	}
	return nil
}

// SettingsError is the verdict on settings that are not valid. Its message is
// the one cel-policy's validate-settings gives for the same settings. It is
// immutable.
type SettingsError struct {
	msg string
	err error
}

// Error returns cel-policy's message.
func (e *SettingsError) Error() string { return e.msg }

// Unwrap returns the decoding error, if that is what is wrong.
func (e *SettingsError) Unwrap() error { return e.err }

// problems collects what is wrong with settings, in cel-policy's order and
// words (Kubernetes' field errors).
type problems []string

func (p *problems) required(path, msg string) {
	*p = append(*p, fmt.Sprintf("%s: Required value: %s", path, msg))
}

func (p *problems) invalid(path, value, msg string) {
	*p = append(*p, fmt.Sprintf(`%s: Invalid value: "%s": %s:`, path, value, msg))
}

func (p *problems) unsupported(path, value string) {
	*p = append(*p, fmt.Sprintf(`%s: Unsupported value: "%s"`, path, value))
}

// err formats the problems as cel-policy does (a hashicorp multierror).
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("The settings are invalid: ")
	if len(p) == 1 {
		fmt.Fprintf(&b, "1 error occurred:\n\t* %s\n\n", p[0])
	} else {
		fmt.Fprintf(&b, "%d errors occurred:\n\t* %s\n\n", len(p), strings.Join(p, "\n\t* "))
	}
	return &SettingsError{msg: b.String()}
}

// checkParams applies cel-policy's rules to paramKind and paramRef.
func (p *problems) checkParams(s *Settings) {
	if s.ParamKind == nil && s.ParamRef == nil {
		return
	}
	const prefix = "failed to validate params: "
	kind, ref := s.ParamKind, s.ParamRef
	switch {
	case kind != nil && (kind.APIVersion == "" || kind.Kind == ""):
		*p = append(*p, prefix+"paramKind: Required value: paramKind must have both APIVersion and Kind specified")
	case ref != nil && ref.Name == "" && ref.Selector == nil:
		*p = append(*p, prefix+"paramRef: Required value: paramRef must have either Name or Selector specified")
	case ref != nil && ref.Name != "" && ref.Selector != nil:
		*p = append(*p, prefix+fmt.Sprintf(`paramRef: Invalid value: "%s": paramRef cannot have both Name and Selector specified:`, ref.Name))
	case ref != nil && (ref.ParameterNotFoundAction == nil ||
		(*ref.ParameterNotFoundAction != parameterNotFoundAllow && *ref.ParameterNotFoundAction != parameterNotFoundDeny)):
		action := "nil"
		if ref.ParameterNotFoundAction != nil {
			action = *ref.ParameterNotFoundAction
		}
		*p = append(*p, prefix+fmt.Sprintf(`paramRef: Invalid value: "%s": parameterNotFoundAction must be 'Deny' or 'Allow' if paramRef is specified:`, action))
	}
}

// checkValidationFields applies cel-policy's rules to a validation's message
// and reason; the expressions are checked by the compiler.
func (p *problems) checkValidationFields(i int, v *Validation) {
	msg := strings.TrimSpace(v.Message)
	switch {
	case v.Message != "" && msg == "":
		p.invalid(fmt.Sprintf("validations[%d].message", i), v.Message, "message must be non-empty if specified")
	case strings.Contains(msg, "\n"):
		p.invalid(fmt.Sprintf("validations[%d].message", i), v.Message, "message must not contain line breaks")
	}
	if _, ok := reasonCodes[v.Reason]; !ok {
		p.unsupported(fmt.Sprintf("validations[%d].reason", i), v.Reason)
	}
}
