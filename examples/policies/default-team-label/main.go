//go:build wasip1

// Command default-team-label is a waPC mutating policy: it adds the label
// team: <default_team> to objects that have no team label and returns the
// changed object as mutated_object; the policy server turns it into the
// JSONPatch of the admission response. Objects that already carry a team
// label (whatever its value) and requests without an object (DELETE) are
// accepted unchanged.
//
// Settings: {"default_team": "platform"}; default_team is optional (default
// "unassigned") and must be a string that is a valid, non-empty label value.
package main

import (
	"errors"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

const (
	// labelPath is the gjson/sjson path of the team label.
	labelPath = "metadata.labels.team"
	// fallbackTeam is the team of objects when the settings name none.
	fallbackTeam = "unassigned"
)

func validateSettings(settings []byte) ([]byte, error) {
	if !gjson.ValidBytes(settings) {
		return protocol.SettingsInvalid("settings are not valid JSON"), nil
	}
	team := gjson.GetBytes(settings, "default_team")
	if !team.Exists() {
		return protocol.SettingsValid(), nil
	}
	if team.Type != gjson.String {
		return protocol.SettingsInvalid("default_team must be a string"), nil
	}
	if !validLabelValue(team.Str) {
		return protocol.SettingsInvalid(fmt.Sprintf("default_team %q is not a valid label value: "+
			"1 to 63 characters, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric", team.Str)), nil
	}
	return protocol.SettingsValid(), nil
}

func validate(payload []byte) ([]byte, error) {
	if !gjson.ValidBytes(payload) {
		return nil, errors.New("the validation request is not valid JSON")
	}
	found := gjson.GetManyBytes(payload, "request.object", "settings.default_team")
	object, team := found[0], found[1].Str
	if !object.IsObject() || object.Get(labelPath).Exists() {
		return protocol.Accept(), nil
	}
	if team == "" {
		team = fallbackTeam
	}
	mutated, err := sjson.SetBytes([]byte(object.Raw), labelPath, team)
	if err != nil {
		return nil, fmt.Errorf("setting the team label: %w", err)
	}
	return protocol.Mutate(mutated), nil
}

// validLabelValue reports whether v is a valid, non-empty Kubernetes label
// value.
func validLabelValue(v string) bool {
	if len(v) == 0 || len(v) > 63 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(v)-1) {
			return false
		}
	}
	return true
}
