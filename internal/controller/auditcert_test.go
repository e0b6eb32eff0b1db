package controller

import (
	"net"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/pki"
)

// The audit scanner's client certificate is re-issued unless it is a client
// certificate of the current CA, far from its expiry, with its own key.
func TestClientCertValid(t *testing.T) {
	now := time.Now()
	newCA := func() *pki.CA {
		ca, err := pki.NewCA("test-ca", now, pki.CAValidity)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca, other := newCA(), newCA()
	must := func(p pki.Pair, err error) pki.Pair {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := must(ca.IssueClient(auditClientCommonName, now, pki.ServerValidity))
	another := must(ca.IssueClient(auditClientCommonName, now, pki.ServerValidity))
	foreign := must(other.IssueClient(auditClientCommonName, now, pki.ServerValidity))
	serving := must(ca.IssueServer(nil, []net.IP{net.IPv4(127, 0, 0, 1)}, now, pki.ServerValidity))
	expiring := must(ca.IssueClient(auditClientCommonName, now, certRenewalMargin-time.Hour))
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      bool
	}{
		{"a client certificate of the CA", good.CertPEM, good.KeyPEM, true},
		{"none", nil, nil, false},
		{"another key", good.CertPEM, another.KeyPEM, false},
		{"of another CA", foreign.CertPEM, foreign.KeyPEM, false},
		{"a serving certificate", serving.CertPEM, serving.KeyPEM, false},
		{"due for renewal", expiring.CertPEM, expiring.KeyPEM, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientCertValid(tc.cert, tc.key, ca, now); got != tc.want {
				t.Errorf("clientCertValid = %v, want %v", got, tc.want)
			}
		})
	}
}
