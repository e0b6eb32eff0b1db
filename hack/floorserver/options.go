package main

import (
	"errors"
	"flag"
)

// Options are the floorserver flags.
type Options struct {
	Addr     string
	CertFile string
	KeyFile  string
	WriteCA  string
}

// AddFlags registers the options on fs, with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:3100", "`address` to listen on; port 0 picks a free port")
	fs.StringVar(&o.CertFile, "cert-file", "", "PEM certificate `file` (default: generate a self-signed one)")
	fs.StringVar(&o.KeyFile, "key-file", "", "PEM private key `file` of -cert-file")
	fs.StringVar(&o.WriteCA, "write-ca", "", "write the generated certificate to this PEM `file`, for loadtest -cacert")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Addr == "" {
		errs = append(errs, errors.New("-addr is required"))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("-cert-file and -key-file go together"))
	}
	if o.WriteCA != "" && o.CertFile != "" {
		errs = append(errs, errors.New("-write-ca writes the generated certificate: it excludes -cert-file"))
	}
	return errors.Join(errs...)
}
