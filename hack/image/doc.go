// Command image builds Warden's container images without a Docker daemon:
// for each binary under cmd/ it compiles a static Go binary (CGO_ENABLED=0,
// -trimpath, -buildvcs=false, -tags grpcnotrace, stripped and with the
// version set by -ldflags "-s -w -X") and wraps it
// in a minimal OCI image assembled with go-containerregistry from nothing
// (no base image is pulled):
//
//	layer 1  /etc/passwd, /etc/group (root and nonroot 65532),
//	         /etc/nsswitch.conf, the build machine's CA bundle at
//	         /etc/ssl/certs/ca-certificates.crt, /home/nonroot (65532,
//	         0700), /tmp (1777)
//	layer 2  /<binary>, mode 0755, owned by root
//	config   User 65532:65532, Entrypoint [/<binary>], WorkingDir
//	         /home/nonroot, org.opencontainers.image.* labels
//
// Every timestamp is the -created time (SOURCE_DATE_EPOCH, else the time of
// the HEAD commit), tar entries are sorted and owned by numeric ids, and
// layers are gzipped by the standard library, so two builds of the same
// tree with the same Go toolchain and CA bundle give the same digests.
//
// Images are named as the Helm chart names them: <-repo>/warden-<binary>
// (ghcr.io/wardenhq/warden-controller, ghcr.io/wardenhq/warden-policy-server),
// or <-repo>/<binary> when the binary's name starts with "warden"
// (wardenctl). With several -platform values the result is an OCI image
// index. -push uploads with oras-go (Docker's config.json credentials;
// -insecure for a plain-HTTP registry), -out writes an OCI image layout
// directory or, for a name ending in .tar, a tarball for docker load.
//
//	go run ./hack/image -binary controller,policy-server -platform linux/amd64 -out /tmp/images
//	go run ./hack/image -repo 127.0.0.1:5000/wardenhq -insecure -push
//
// See docs/images.md. It must not import Warden's runtime packages: it
// builds the binaries with the go command, it does not link them.
package main
