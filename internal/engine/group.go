package engine

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/groupexpr"
)

// Messages of policy groups; they are Kubewarden's
// (docs/compatibility.md#policy-groups).
const (
	msgGroupMutation   = "mutation is not allowed inside of policy group"
	prefixGroupExprErr = "error evaluating policy group expression: "
)

// policyGroup is a loaded policy group: members combined by a CEL
// expression (docs/compatibility.md#policy-groups).
type policyGroup struct {
	expr    *groupexpr.Expression
	message string
	members map[string]*Policy // by member name
	names   []string           // sorted: the order of the causes
}

// memberLoad is the outcome of loading one group member.
type memberLoad struct {
	ID     string // group/member
	policy *Policy
	err    error
}

// group builds a policy group and its members. Each member is a policy of its
// own, reachable as group/member, in protect mode without mutation. Like
// Kubewarden, every member's settings and the expression are checked, and
// all their errors are reported together.
func (l *loader) group(ctx context.Context, id string, c *PolicyConfig) (*Policy, map[string]memberLoad, error) {
	g := &policyGroup{message: c.Message, members: map[string]*Policy{}, names: sortedKeys(c.Policies)}
	members := make(map[string]memberLoad, len(c.Policies))
	var problems []string
	stage := StageSettings // of the expression, unless a member fails
	for _, name := range g.names {
		m := memberLoad{ID: id + "/" + name}
		m.policy, m.err = l.policy(ctx, m.ID, c.Policies[name].config())
		members[name] = m
		var invalid *invalidSettingsError
		switch {
		case errors.As(m.err, &invalid):
			problems = append(problems, m.ID+": settings not valid: "+m.err.Error())
		case m.err != nil:
			problems = append(problems, m.ID+": "+m.err.Error())
		default:
			g.members[name] = m.policy
			continue
		}
		if len(problems) == 1 {
			stage = FailedStage(m.err)
		}
	}
	expr, err := groupexpr.Compile(c.Expression, g.names)
	if err != nil {
		problems = append(problems, id+": "+err.Error())
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, members, &stageError{stage: stage, err: errors.New(strings.Join(problems, ", "))}
	}
	g.expr = expr
	return &Policy{ID: id, Mode: c.Mode(), group: g}, members, nil
}

// evaluateGroup evaluates a group's expression, evaluating members lazily as
// it reaches them. A rejection carries the group's message and one cause per
// evaluated member that rejected, in member-name order (Kubewarden's order
// is that of a hash map).
func (e *Engine) evaluateGroup(ctx context.Context, p *Policy, req request) *admission.Response {
	g := p.group
	rejected := map[string]string{} // member name -> its message
	allowed, err := g.expr.Eval(func(name string) bool {
		resp, _ := e.evaluate(ctx, g.members[name], req)
		switch {
		case resp == nil: // the client has gone: the answer is not read
			return false
		case resp.Patch != nil:
			rejected[name] = msgGroupMutation
			return false
		case !resp.Allowed:
			rejected[name] = ""
			if resp.Status != nil {
				rejected[name] = resp.Status.Message
			}
		}
		return resp.Allowed
	})
	if err != nil {
		return reject(req.uid, prefixGroupExprErr+err.Error(), 500)
	}
	if allowed {
		return &admission.Response{UID: req.uid, Allowed: true}
	}
	causes := []admission.Cause{}
	for _, name := range g.names {
		if msg, ok := rejected[name]; ok {
			causes = append(causes, admission.Cause{Field: "spec.policies." + name, Message: msg})
		}
	}
	return &admission.Response{UID: req.uid, Allowed: false, Status: &admission.Status{
		Message: g.message,
		Details: &admission.StatusDetails{Causes: causes},
	}}
}
