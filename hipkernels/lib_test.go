package hipkernels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadMissingLibraryIsAClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), LibraryName)
	_, err := load(path)
	if err == nil {
		t.Fatal("loading a missing library succeeded")
	}
	for _, want := range []string{path, EnvLibrary, "make kernels", "pip install atom-go[cuda]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLoadRejectsANonLibrary(t *testing.T) {
	path := filepath.Join(t.TempDir(), LibraryName)
	if err := os.WriteFile(path, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := load(path); err == nil {
		t.Fatal("loading a text file as the library succeeded")
	}
}

func TestLibraryPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvLibrary, dir)
	if got, want := LibraryPath(), filepath.Join(dir, LibraryName); got != want {
		t.Errorf("folder in %s: LibraryPath() = %q, want %q", EnvLibrary, got, want)
	}
	file := filepath.Join(dir, "custom.so")
	t.Setenv(EnvLibrary, file)
	if got := LibraryPath(); got != file {
		t.Errorf("file in %s: LibraryPath() = %q, want %q", EnvLibrary, got, file)
	}
	t.Setenv(EnvLibrary, "")
	if got := LibraryPath(); got != LibraryName && filepath.Base(got) != LibraryName {
		t.Errorf("no %s: LibraryPath() = %q", EnvLibrary, got)
	}
}

func TestErrorCarriesTheMessage(t *testing.T) {
	err := error(&Error{Op: "atomk_malloc", Status: StatusRuntime, Msg: "out of memory"})
	if !IsStatus(err, StatusRuntime) || IsStatus(err, StatusBlas) {
		t.Error("IsStatus does not match the status")
	}
	if s := err.Error(); !strings.Contains(s, "atomk_malloc") || !strings.Contains(s, "out of memory") {
		t.Errorf("error text %q lacks the op or the message", s)
	}
}
