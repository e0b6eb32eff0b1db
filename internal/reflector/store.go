// Package reflector keeps copies of Kubernetes objects for the policies
// that read the cluster, as Kubewarden's reflectors do, in a SQLite
// database instead of memory (RFC 004).
//
// A Store is the database: one table per resource, named after its group,
// version and resource (v1_pods, apps_v1_deployments,
// networking_k8s_io_v1_ingresses), with a row per object: its name, its
// namespace ("" for a cluster-scoped object: SQLite would not keep a NULL
// in the primary key unique) and the object as JSON, without managedFields
// or the kubectl last-applied-configuration annotation, as Kubewarden's
// reflectors keep them. The primary key is the RFC's (name, namespace) the
// other way round, and the table is clustered on it (WITHOUT ROWID): a
// namespace's objects are read by the key, in the order the API server
// lists them. The reflectors are the single writer, through one
// connection; readers have a pool of their own, and the write-ahead log
// lets them read while a reflector writes.
//
// Reflectors (reflectors.go) fill the tables from list-and-watch streams of
// the API server.
//
// This package knows nothing of policies or host calls: it imports nothing
// of Warden but internal/observability's log keys.
package reflector

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Store is the reflectors' database. Safe for concurrent use.
type Store struct {
	writer *sql.DB // one connection: SQLite has one writer at a time
	reader *sql.DB

	mu     sync.Mutex
	tables map[string]*Table
}

// Open opens the database at path, creating it. The database is a cache:
// what it holds is rebuilt from the API server, so a file left by an
// earlier run is emptied table by table as reflectors start.
func Open(path string) (*Store, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=busy_timeout(10000)"
	writer, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the reflector database %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	if err := writer.Ping(); err != nil {
		writer.Close()
		return nil, fmt.Errorf("opening the reflector database %s: %w", path, err)
	}
	reader, err := sql.Open("sqlite", dsn+"&_pragma=query_only(true)")
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("opening the reflector database %s: %w", path, err)
	}
	return &Store{writer: writer, reader: reader, tables: map[string]*Table{}}, nil
}

// Close closes the database.
func (s *Store) Close() error {
	return errors.Join(s.reader.Close(), s.writer.Close())
}

var notIdentifier = regexp.MustCompile(`[^A-Za-z0-9]+`)

// TableName is the name of the table of a resource: v1_pods,
// apps_v1_deployments, networking_k8s_io_v1_ingresses.
func TableName(gvr schema.GroupVersionResource) string {
	parts := []string{gvr.Version, gvr.Resource}
	if gvr.Group != "" {
		parts = append([]string{gvr.Group}, parts...)
	}
	return notIdentifier.ReplaceAllString(strings.Join(parts, "_"), "_")
}

// Table returns the table of a resource, creating it empty.
func (s *Store) Table(ctx context.Context, gvr schema.GroupVersionResource) (*Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := TableName(gvr)
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	for _, stmt := range []string{
		`DROP TABLE IF EXISTS "` + name + `"`,
		`CREATE TABLE "` + name + `" (name TEXT NOT NULL, namespace TEXT NOT NULL, object TEXT NOT NULL, PRIMARY KEY (namespace, name)) WITHOUT ROWID`,
	} {
		if _, err := s.writer.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("creating the table %s: %w", name, err)
		}
	}
	t := &Table{store: s, name: name, synced: make(chan struct{})}
	s.tables[name] = t
	return t, nil
}

// Table holds the objects of one resource. It is the store a client-go
// Reflector writes into (cache.ReflectorStore), and answers lists.
type Table struct {
	store *Store
	name  string

	syncOnce sync.Once
	synced   chan struct{} // closed by the first Replace: the table holds a full list

	mu      sync.Mutex
	changed time.Time // of the last write
}

// Synced is closed once the table holds a full list of the resource.
func (t *Table) Synced() <-chan struct{} { return t.synced }

// WaitSynced waits until the table holds a full list, or ctx is done.
func (t *Table) WaitSynced(ctx context.Context) error {
	select {
	case <-t.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the reflector of %s to list its objects: %w", t.name, ctx.Err())
	}
}

// ChangedSince reports whether the table was written after since.
func (t *Table) ChangedSince(since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed.After(since)
}

func (t *Table) touch() {
	t.mu.Lock()
	t.changed = time.Now()
	t.mu.Unlock()
}

// row is an object as the table keeps it.
type row struct {
	name, namespace string
	object          []byte
}

func toRow(obj any) (row, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return row{}, fmt.Errorf("reflector store: unexpected object %T", obj)
	}
	Trim(u.Object)
	b, err := json.Marshal(u.Object)
	if err != nil {
		return row{}, err
	}
	return row{name: u.GetName(), namespace: u.GetNamespace(), object: b}, nil
}

// Trim drops what Kubewarden's reflectors drop from the objects they keep:
// managedFields and the kubectl last-applied-configuration annotation.
func Trim(obj map[string]any) {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return
	}
	delete(md, "managedFields")
	if ann, ok := md["annotations"].(map[string]any); ok {
		delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
	}
}

func (t *Table) upsert(obj any) error {
	r, err := toRow(obj)
	if err != nil {
		return err
	}
	_, err = t.store.writer.Exec(`INSERT INTO "`+t.name+`" (name, namespace, object) VALUES (?, ?, ?)
		ON CONFLICT (namespace, name) DO UPDATE SET object = excluded.object`, r.name, r.namespace, r.object)
	t.touch()
	return err
}

// Add implements cache.ReflectorStore.
func (t *Table) Add(obj any) error { return t.upsert(obj) }

// Update implements cache.ReflectorStore.
func (t *Table) Update(obj any) error { return t.upsert(obj) }

// Delete implements cache.ReflectorStore.
func (t *Table) Delete(obj any) error {
	r, err := toRow(obj)
	if err != nil {
		return err
	}
	_, err = t.store.writer.Exec(`DELETE FROM "`+t.name+`" WHERE name = ? AND namespace = ?`, r.name, r.namespace)
	t.touch()
	return err
}

// Replace implements cache.ReflectorStore: the table becomes list, in one
// transaction, so that readers see the old objects or the new ones.
func (t *Table) Replace(list []any, _ string) error {
	tx, err := t.store.writer.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(`DELETE FROM "` + t.name + `"`); err != nil {
		return err
	}
	insert, err := tx.Prepare(`INSERT OR REPLACE INTO "` + t.name + `" (name, namespace, object) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	for _, obj := range list {
		r, err := toRow(obj)
		if err != nil {
			return err
		}
		if _, err := insert.Exec(r.name, r.namespace, r.object); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	t.touch()
	t.syncOnce.Do(func() { close(t.synced) })
	return nil
}

// Resync implements cache.ReflectorStore; it has nothing to do.
func (t *Table) Resync() error { return nil }

// List returns the objects of the table as JSON, those of namespace only
// when it is not nil, ordered by namespace and name as the API server
// lists them.
func (t *Table) List(ctx context.Context, namespace *string) ([]json.RawMessage, error) {
	query, args := `SELECT object FROM "`+t.name+`" ORDER BY namespace, name`, []any(nil)
	if namespace != nil {
		query, args = `SELECT object FROM "`+t.name+`" WHERE namespace = ? ORDER BY name`, []any{*namespace}
	}
	rows, err := t.store.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading the reflector table %s: %w", t.name, err)
	}
	defer rows.Close()
	var out []json.RawMessage
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
