package plugin_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/plugin"
)

// envTestHost makes the test binary a go-plugin host (see init): its value is the atom-plugin
// binary to start.
const envTestHost = "ATOM_PLUGIN_TEST_HOST"

// init runs before TestMain, so a re-executed test binary acts as a host without building
// anything: it starts the plugin, prints "PID ADDRESS DIR", and stops it when stdin closes.
func init() {
	path := os.Getenv(envTestHost)
	if path == "" {
		return
	}
	c := plugin.NewClient(plugin.ClientConfig{Path: path})
	addr, err := c.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test host:", err)
		os.Exit(2)
	}
	fmt.Printf("%d %s %s\n", c.Pid(), addr, c.SocketDir())
	_, _ = io.Copy(io.Discard, os.Stdin)
	c.Kill()
	os.Exit(0)
}

// waitGone polls until none of paths exists (a deadline, not a sleep).
func waitGone(t *testing.T, what string, paths ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, p := range paths {
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "%s: %v still exist", what, paths)
}

// processGone reports whether pid no longer runs (absent, or a zombie nobody reaped yet).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// requirePrivateSocket checks that addr is a socket directly inside dir and dir has mode 0700.
func requirePrivateSocket(t *testing.T, addr, dir string) {
	t.Helper()
	require.Equal(t, dir, filepath.Dir(addr), "the socket is in the private directory")
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "socket directory mode")
	si, err := os.Lstat(addr)
	require.NoError(t, err)
	require.NotZero(t, si.Mode()&os.ModeSocket, "%s is a socket", addr)
}

// TestClientSocketDirIsRemoved: the Go host's socket directory is private and, with the
// socket, gone after each way the plugin can stop.
func TestClientSocketDirIsRemoved(t *testing.T) {
	t.Setenv(plugin.EnvSocketDir, "/nonexistent") // an inherited value must not win
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, c *plugin.Client)
	}{
		// go-plugin's own Kill (controller Shutdown): the directory is the plugin's to remove.
		{"controller shutdown", func(t *testing.T, c *plugin.Client) { c.Client.Kill() }},
		// Nobody but the plugin removes anything before the poll below ends.
		{"SIGTERM", func(t *testing.T, c *plugin.Client) { require.NoError(t, syscall.Kill(c.Pid(), syscall.SIGTERM)) }},
		{"SIGHUP", func(t *testing.T, c *plugin.Client) { require.NoError(t, syscall.Kill(c.Pid(), syscall.SIGHUP)) }},
		{"client Kill", func(t *testing.T, c *plugin.Client) { c.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := plugin.NewClient(plugin.ClientConfig{Path: binary})
			t.Cleanup(c.Kill)
			addr, err := c.Start()
			require.NoError(t, err)
			dir := c.SocketDir()
			requirePrivateSocket(t, addr.String(), dir)
			pid := c.Pid()
			tc.stop(t, c)
			waitGone(t, tc.name, addr.String(), dir)
			require.Eventually(t, func() bool { return processGone(pid) }, 30*time.Second, 5*time.Millisecond)
		})
	}
}

// TestHostSIGKILLRemovesSocketDir: a host killed with SIGKILL cannot clean up; the plugin
// notices it is gone, stops and removes its socket and the host's directory.
func TestHostSIGKILLRemovesSocketDir(t *testing.T) {
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), envTestHost+"="+binary)
	stdin, err := host.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := host.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	host.Stderr = &stderr
	require.NoError(t, host.Start())
	defer func() { _ = host.Process.Kill(); _ = host.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "host stderr: %s", stderr.String())
	f := strings.Fields(line)
	require.Len(t, f, 3, "host line %q", line)
	pid, err := strconv.Atoi(f[0])
	require.NoError(t, err)
	addr, dir := f[1], f[2]
	requirePrivateSocket(t, addr, dir)
	require.False(t, processGone(pid))

	require.NoError(t, host.Process.Signal(syscall.SIGKILL))
	_ = host.Wait()
	waitGone(t, "after the host's SIGKILL", addr, dir)
	require.Eventually(t, func() bool { return processGone(pid) }, 30*time.Second, 5*time.Millisecond, "plugin %d outlived its host", pid)
}

// rawPlugin starts the binary as a host that sets PLUGIN_UNIX_SOCKET_DIR to dir ("": unset)
// would, and returns the process and its handshake line, or its stderr when it printed none.
func rawPlugin(t *testing.T, dir string, extraEnv ...string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(binary)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, plugin.EnvSocketDir+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, bridge.MagicCookieKey+"="+bridge.MagicCookieValue, "PLUGIN_PROTOCOL_VERSIONS=1")
	if dir != "" {
		cmd.Env = append(cmd.Env, plugin.EnvSocketDir+"="+dir)
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line == "" {
		_ = cmd.Wait()
		return cmd, "", stderr.String()
	}
	return cmd, strings.TrimSpace(line), ""
}

// socketOf returns the unix socket path of a handshake line.
func socketOf(t *testing.T, line string) string {
	t.Helper()
	f := strings.Split(line, "|")
	require.GreaterOrEqual(t, len(f), 5, "handshake %q", line)
	require.Equal(t, "unix", f[2])
	return f[3]
}

// shortTempDir is a directory with a short path (a socket path is limited to ~108 bytes).
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ap")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// TestPluginChecksSocketDir: the plugin side uses a private directory as it is, makes a
// private one inside a shared sticky directory or TMPDIR, and refuses one anyone can write to
// without the sticky bit; each is gone after SIGTERM, with exit status 0.
func TestPluginChecksSocketDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode // of the directory passed; 0: the variable is unset (TMPDIR is used)
		// own: the socket is directly in the directory passed; else in a new one inside it
		own     bool
		refused string
	}{
		{name: "private", mode: 0o700, own: true},
		{name: "sticky shared", mode: 0o777 | os.ModeSticky},
		{name: "readable by others", mode: 0o755},
		{name: "unset", mode: 0},
		{name: "world-writable", mode: 0o777, refused: "writable by other users and not sticky"},
		{name: "group-writable", mode: 0o770, refused: "writable by other users and not sticky"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := shortTempDir(t)
			passed, env := base, []string(nil)
			if tc.mode == 0 {
				passed, env = "", []string{"TMPDIR=" + base}
			} else {
				require.NoError(t, os.Chmod(base, tc.mode))
			}
			cmd, line, stderr := rawPlugin(t, passed, env...)
			if tc.refused != "" {
				require.Empty(t, line)
				require.Contains(t, stderr, tc.refused)
				require.Equal(t, 1, cmd.ProcessState.ExitCode())
				entries, err := os.ReadDir(base)
				require.NoError(t, err)
				require.Empty(t, entries, "a refused directory is left untouched")
				return
			}
			require.NotEmpty(t, line, "stderr: %s", stderr)
			sock := socketOf(t, line)
			dir := filepath.Dir(sock)
			requirePrivateSocket(t, sock, dir)
			if tc.own {
				require.Equal(t, base, dir)
			} else {
				require.Equal(t, base, filepath.Dir(dir), "a private directory inside the one given")
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, cmd.Wait(), "SIGTERM is an orderly stop")
			waitGone(t, "after SIGTERM", sock, dir)
			if !tc.own {
				_, err := os.Stat(base)
				require.NoError(t, err, "the shared directory itself stays")
			}
		})
	}
}

// TestPluginLeavesHostFilesAlone: cleaning a host's directory removes sockets only; a file
// the host put there, and so the directory, stay.
func TestPluginLeavesHostFilesAlone(t *testing.T) {
	base := shortTempDir(t)
	keep := filepath.Join(base, "keep.txt")
	require.NoError(t, os.WriteFile(keep, []byte("host data"), 0o600))
	cmd, line, stderr := rawPlugin(t, base)
	require.NotEmpty(t, line, "stderr: %s", stderr)
	sock := socketOf(t, line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	waitGone(t, "the socket", sock)
	b, err := os.ReadFile(keep)
	require.NoError(t, err)
	require.Equal(t, "host data", string(b))
}
