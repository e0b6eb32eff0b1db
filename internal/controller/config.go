package controller

import (
	"fmt"
	"sort"

	"sigs.k8s.io/yaml"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// sourceAuthority is one CA of a host in sources.yml.
type sourceAuthority struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// sourcesConfig renders the sources.yml of a PolicyServer, or nil when it
// configures no source.
func sourcesConfig(ps *policiesv1.PolicyServer) ([]byte, error) {
	if len(ps.Spec.InsecureSources) == 0 && len(ps.Spec.SourceAuthorities) == 0 {
		return nil, nil
	}
	var doc struct {
		InsecureSources   []string                     `json:"insecure_sources,omitempty"`
		SourceAuthorities map[string][]sourceAuthority `json:"source_authorities,omitempty"`
	}
	doc.InsecureSources = append([]string(nil), ps.Spec.InsecureSources...)
	sort.Strings(doc.InsecureSources)
	if len(ps.Spec.SourceAuthorities) > 0 {
		doc.SourceAuthorities = map[string][]sourceAuthority{}
		for host, pems := range ps.Spec.SourceAuthorities {
			for _, pem := range pems {
				doc.SourceAuthorities[host] = append(doc.SourceAuthorities[host], sourceAuthority{Type: "Data", Data: pem})
			}
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding sources.yml: %w", err)
	}
	return b, nil
}
