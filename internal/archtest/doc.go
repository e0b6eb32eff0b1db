// Package archtest keeps Warden's map of itself true. Its tests read the
// source tree (file names, import declarations and comments, under every
// build tag, and the markdown pages) and fail when:
//
//   - ARCHITECTURE.md's package map misses a package of the main module, or
//     names one that no longer exists, or misstates the Warden packages one
//     imports or the order of its layers (architecture_test.go);
//   - a package breaks an import rule that a package's documentation states:
//     "must not import", "imports nothing from Warden but", "only tests
//     import it" (imports_test.go, one table entry per sentence, checked to
//     be still in the comment it quotes);
//   - a package comment states such a rule that the table does not hold;
//   - a Go comment or a markdown page links an anchor of
//     docs/compatibility.md that none of its headings has, or a Go comment
//     cites, by section number, Kubewarden compatibility notes that are not
//     in the repository (compatlinks_test.go).
//
// The package has tests only; nothing imports it. It imports no Warden
// package: it reads the tree as text, with go/parser and go/scanner.
package archtest
