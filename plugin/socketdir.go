package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// The plugin's Unix socket lives in a directory only its user can enter: go-plugin's server
// creates it with os.CreateTemp(PLUGIN_UNIX_SOCKET_DIR, "plugin"), and without the variable
// that is the shared temporary directory, where any local user can see it and a socket mode
// is all that stands between them and the engine. go-plugin's Go client sets the variable only
// for custom runners, so every atom-go host (NewClient, `atom-plugin --handshake`, the Python
// host) makes a fresh 0700 directory and passes it, and the plugin side checks what it got.

// EnvSocketDir is go-plugin's variable naming the directory the plugin creates its socket in.
const EnvSocketDir = "PLUGIN_UNIX_SOCKET_DIR"

// socketDirPrefix names the directories atom-go makes for a socket.
const socketDirPrefix = "atom-plugin-"

// ErrUnsafeSocketDir is returned for a socket directory that other users could write to
// without the sticky bit (they could replace the socket).
var ErrUnsafeSocketDir = errors.New("unsafe socket directory")

// NewSocketDir makes a fresh directory for one plugin's socket, mode 0700, in base (""; the
// system's temporary directory). The caller removes it once the plugin has exited.
func NewSocketDir(base string) (string, error) {
	dir, err := os.MkdirTemp(base, socketDirPrefix)
	if err != nil {
		return "", fmt.Errorf("make the plugin's socket directory: %w", err)
	}
	// MkdirTemp's 0700 is narrowed by the umask; the owner needs all three bits.
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("make the plugin's socket directory: %w", err)
	}
	return dir, nil
}

// socketDir is the plugin side's socket directory and how to clean it up.
type socketDir struct {
	path string
	// owned: the plugin made it and removes it whole; otherwise the host made it and the
	// plugin removes only the sockets in it and then the directory if that left it empty.
	owned bool
	once  sync.Once
}

// prepareSocketDir chooses the directory go-plugin's listener will create the socket in and
// points EnvSocketDir at it. A private directory of this user (what atom-go's hosts pass) is
// used as it is; a missing variable, or a shared directory with the sticky bit (such as /tmp),
// gets a fresh private directory inside it; a directory others can write to without the
// sticky bit is refused.
func prepareSocketDir() (*socketDir, error) {
	given := os.Getenv(EnvSocketDir)
	if given != "" {
		fi, err := os.Stat(given)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvSocketDir, given, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s=%s is not a directory", EnvSocketDir, given)
		}
		perm := fi.Mode().Perm()
		if ownedByMe(fi) && perm&0o077 == 0 {
			return &socketDir{path: given}, nil
		}
		if perm&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
			return nil, fmt.Errorf("%s=%s (mode %04o) is writable by other users and not sticky: %w",
				EnvSocketDir, given, perm, ErrUnsafeSocketDir)
		}
	}
	dir, err := NewSocketDir(given)
	if err != nil {
		return nil, err
	}
	if err := os.Setenv(EnvSocketDir, dir); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("set %s: %w", EnvSocketDir, err)
	}
	return &socketDir{path: dir, owned: true}, nil
}

// ownedByMe reports whether this process's user owns fi.
func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// remove deletes the socket directory (once; safe from several goroutines). A host's
// directory loses only its sockets (the plugin's, and a host relay's whose host is gone) and
// is removed when that empties it; nothing else in it is touched.
func (d *socketDir) remove() {
	if d == nil {
		return
	}
	d.once.Do(func() {
		if d.owned {
			_ = os.RemoveAll(d.path)
			return
		}
		entries, _ := os.ReadDir(d.path)
		for _, e := range entries {
			if e.Type()&os.ModeSocket != 0 {
				_ = os.Remove(filepath.Join(d.path, e.Name()))
			}
		}
		_ = os.Remove(d.path)
	})
}
