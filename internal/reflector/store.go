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
// A list is written page by page, each page in a transaction of its own,
// into a table of its own that replaces the resource's table when the last
// page is in: memory holds one page, the write-ahead log one page's
// writes, and readers see the old list or the new one, never half of it.
//
// Reflectors (reflectors.go) fill the tables from list-and-watch streams of
// the API server.
//
// This package knows nothing of policies or host calls: it imports nothing
// of Warden but internal/jsontape, to trim objects, and
// internal/observability's log keys.
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
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Store is the reflectors' database. Safe for concurrent use.
type Store struct {
	writer *sql.DB // one connection: SQLite has one writer at a time
	reader *sql.DB

	// writes numbers the tables' versions: a version is never used twice,
	// not even by a table dropped and created again.
	writes atomic.Uint64

	mu     sync.Mutex
	tables map[string]*Table
}

// walLimit is the size the write-ahead log is cut back to when it starts
// again after a checkpoint. A list is written a page per transaction, so
// the log needs to hold little more than a page.
const walLimit = 8 << 20

// Open opens the database at path, creating it. The database is a cache:
// what it holds is rebuilt from the API server, so a file left by an
// earlier run is emptied table by table as reflectors start.
func Open(path string) (*Store, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=busy_timeout(10000)" +
		fmt.Sprintf("&_pragma=journal_size_limit(%d)", walLimit)
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

// checkpoint copies what it can of the write-ahead log into the database
// without waiting for readers (SQLite's checkpoint at a commit waits for
// the log to reach 1,000 pages). The next write after a full checkpoint
// starts the log again, cut back to walLimit.
func (s *Store) checkpoint(ctx context.Context) error {
	_, err := s.writer.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
	return err
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

// createTable (re)creates an empty table of objects named name.
func (s *Store) createTable(ctx context.Context, name string) error {
	for _, stmt := range []string{
		`DROP TABLE IF EXISTS "` + name + `"`,
		`CREATE TABLE "` + name + `" (name TEXT NOT NULL, namespace TEXT NOT NULL, object TEXT NOT NULL, PRIMARY KEY (namespace, name)) WITHOUT ROWID`,
	} {
		if _, err := s.writer.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("creating the table %s: %w", name, err)
		}
	}
	return nil
}

// Table returns the table of a resource, creating it empty.
func (s *Store) Table(ctx context.Context, gvr schema.GroupVersionResource) (*Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := TableName(gvr)
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	if err := s.createTable(ctx, name); err != nil {
		return nil, err
	}
	t := &Table{store: s, name: name, synced: make(chan struct{})}
	t.version.Store(s.writes.Add(1))
	s.tables[name] = t
	return t, nil
}

// Drop drops the table of a resource, which must no longer be written.
// Lists of it that are still running fail; Table creates it again, empty.
func (s *Store) Drop(ctx context.Context, gvr schema.GroupVersionResource) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := TableName(gvr)
	delete(s.tables, name)
	if _, err := s.writer.ExecContext(ctx, `DROP TABLE IF EXISTS "`+name+`"`); err != nil {
		return fmt.Errorf("dropping the table %s: %w", name, err)
	}
	return nil
}

// Table holds the objects of one resource, written by one reflector, and
// answers lists. Safe for concurrent use, though its writes are meant to
// come from one goroutine.
type Table struct {
	store *Store
	name  string

	syncOnce sync.Once
	synced   chan struct{} // closed by the first complete list

	version atomic.Uint64 // Store.writes at the last write

	mu      sync.Mutex
	changed time.Time // of the last write
}

// Name is the table's name in the database.
func (t *Table) Name() string { return t.name }

// HasSynced reports whether the table holds a full list of the resource.
func (t *Table) HasSynced() bool {
	select {
	case <-t.synced:
		return true
	default:
		return false
	}
}

// WaitSynced waits until the table holds a full list, or ctx is done.
func (t *Table) WaitSynced(ctx context.Context) error {
	select {
	case <-t.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the reflector of %s to list its objects: %w", t.name, ctx.Err())
	}
}

// Version changes at every write of the table: what was read at one
// version is what the table holds while Version answers the same. No two
// tables of a Store, dropped or not, have the same version.
func (t *Table) Version() uint64 { return t.version.Load() }

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
	t.version.Store(t.store.writes.Add(1))
}

// Object is an object as a table keeps it.
type Object struct {
	Name, Namespace string
	JSON            []byte // without managedFields and last-applied-configuration
}

// objectMeta is what the store reads of an object's metadata.
type objectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// Trimmed reads an object as the API server sends it and returns it as a
// table keeps it: what Kubewarden's reflectors drop from the objects they
// keep (managedFields, the kubectl last-applied-configuration annotation)
// is dropped, and the object is written as client-go's unstructured
// objects are (json.Marshal of the decoded object: the fields in the order
// of their names), as the objects of direct lists are. The items of a list
// come without apiVersion and kind: typ gives them, as client-go does.
func Trimmed(raw []byte, typ metav1.TypeMeta) (Object, error) {
	var w trimmer
	return w.trimmed(raw, typ)
}

// Trim drops what Kubewarden's reflectors drop from the objects they keep:
// managedFields and the kubectl last-applied-configuration annotation.
func Trim(obj map[string]any) {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return
	}
	delete(md, managedFieldsKey)
	if ann, ok := md["annotations"].(map[string]any); ok {
		delete(ann, lastAppliedKey)
	}
}

// Put writes an object, trimmed, in place of the one of the same
// namespace and name.
func (t *Table) Put(ctx context.Context, o Object) error {
	_, err := t.store.writer.ExecContext(ctx, `INSERT INTO "`+t.name+`" (name, namespace, object) VALUES (?, ?, ?)
		ON CONFLICT (namespace, name) DO UPDATE SET object = excluded.object`, o.Name, o.Namespace, o.JSON)
	t.touch()
	return err
}

// Remove removes the object of a namespace ("" for a cluster-scoped one)
// and name.
func (t *Table) Remove(ctx context.Context, namespace, name string) error {
	_, err := t.store.writer.ExecContext(ctx, `DELETE FROM "`+t.name+`" WHERE name = ? AND namespace = ?`, name, namespace)
	t.touch()
	return err
}

// Listing is a full list being written into a table: pages go into a table
// of their own, which replaces the table at Commit. It is used by one
// goroutine.
type Listing struct {
	t    *Table
	next string // the table the pages go into
}

// NewListing starts writing a full list of the table's resource.
func (t *Table) NewListing(ctx context.Context) (*Listing, error) {
	l := &Listing{t: t, next: t.name + "__listing"}
	if err := t.store.createTable(ctx, l.next); err != nil {
		return nil, err
	}
	return l, nil
}

// Page writes a page of the list, in one transaction.
func (l *Listing) Page(ctx context.Context, objects []Object) error {
	tx, err := l.t.store.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	insert, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO "`+l.next+`" (name, namespace, object) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	for _, o := range objects {
		if _, err := insert.ExecContext(ctx, o.Name, o.Namespace, o.JSON); err != nil {
			return fmt.Errorf("writing %s/%s into %s: %w", o.Namespace, o.Name, l.next, err)
		}
	}
	return tx.Commit()
}

// Commit makes the list the table's objects, in one transaction, and
// checkpoints the write-ahead log (Store.checkpoint).
func (l *Listing) Commit(ctx context.Context) error {
	tx, err := l.t.store.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	for _, stmt := range []string{
		`DROP TABLE "` + l.t.name + `"`,
		`ALTER TABLE "` + l.next + `" RENAME TO "` + l.t.name + `"`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("replacing the table %s: %w", l.t.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("replacing the table %s: %w", l.t.name, err)
	}
	l.t.touch()
	l.t.syncOnce.Do(func() { close(l.t.synced) })
	return l.t.store.checkpoint(ctx)
}

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

// Get returns the object of a namespace ("" for a cluster-scoped one) and
// name, or nil when the table has none.
func (t *Table) Get(ctx context.Context, namespace, name string) ([]byte, error) {
	var b []byte
	err := t.store.reader.QueryRowContext(ctx, `SELECT object FROM "`+t.name+`" WHERE namespace = ? AND name = ?`, namespace, name).Scan(&b)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the reflector table %s: %w", t.name, err)
	}
	return b, nil
}
