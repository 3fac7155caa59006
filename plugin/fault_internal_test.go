package plugin

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

func TestParseFault(t *testing.T) {
	f, err := parseFault("")
	require.NoError(t, err)
	require.Nil(t, f)
	for _, tc := range []struct {
		v       string
		mode    string
		at      int64
		engines int64
	}{
		{"panic@7", "panic", 7, 0},
		{"stall@2", "stall", 2, 0},
		{"exit@1", "exit", 1, 0},
		{"devicefault@40", "devicefault", 40, 0},
		{"devicefault@40:1", "devicefault", 40, 1},
		{"exit@3:2", "exit", 3, 2},
	} {
		f, err := parseFault(tc.v)
		require.NoError(t, err, tc.v)
		require.Equal(t, tc.mode, f.mode, tc.v)
		require.Equal(t, tc.at, f.at, tc.v)
		require.Equal(t, tc.engines, f.engines, tc.v)
	}
	require.Nil(t, (&fault{mode: "exit", at: 1}).stallHook())
	for _, bad := range []string{"exit", "exit@", "exit@0", "exit@-1", "boom@3", "exit@x", "exit@3:", "exit@3:0",
		"exit@3:-1", "exit@3:x", "devicefault@:1", "stall@1:2:3"} {
		_, err := parseFault(bad)
		require.Error(t, err, bad)
	}
	var none *fault
	none.hit(hclog.NewNullLogger(), nil) // a disarmed fault is a no-op
}

// TestFaultArmedIn: MODE@N:K arms the first K engines of a host (GenerationEnv 0 .. K-1; a
// plugin without the variable is the first); MODE@N arms every one.
func TestFaultArmedIn(t *testing.T) {
	for _, tc := range []struct {
		v     string
		gen   string
		armed bool
	}{
		{"exit@3", "", true},
		{"exit@3", "5", true},
		{"exit@3:1", "", true},
		{"exit@3:1", "0", true},
		{"exit@3:1", "1", false},
		{"exit@3:2", "1", true},
		{"exit@3:2", "2", false},
		{"exit@3:1", "junk", true},
	} {
		f, err := parseFault(tc.v)
		require.NoError(t, err)
		require.Equal(t, tc.armed, f.armedIn(tc.gen), "%s in generation %q", tc.v, tc.gen)
	}
}
