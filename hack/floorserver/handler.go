package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/wardenhq/warden/internal/admission"
)

// maxBodyBytes bounds a request body, like the Kubernetes API server's own
// 3 MiB request limit with some room.
const maxBodyBytes = 4 << 20

// newHandler returns the webhook: POST /validate/{name} allows every
// AdmissionReview that decodes. It is safe for concurrent use.
func newHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate/{name}", validate)
	return mux
}

// validate decodes the AdmissionReview and allows it.
func validate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		status := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "reading the request body: "+err.Error(), status)
		return
	}
	var review struct {
		Request *admission.Request `json:"request"`
	}
	err = json.Unmarshal(body, &review)
	if err == nil && review.Request == nil {
		err = admission.ErrNoRequest
	}
	if err != nil {
		http.Error(w, "decoding the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	out, err := json.Marshal(admission.NewReview(&admission.Response{UID: review.Request.UID, Allowed: true}))
	if err != nil {
		http.Error(w, "encoding the AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out) // a failed write is the client's problem
}
