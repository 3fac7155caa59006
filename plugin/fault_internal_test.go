package plugin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseFault(t *testing.T) {
	f, err := parseFault("")
	require.NoError(t, err)
	require.Nil(t, f)
	f, err = parseFault("panic@7")
	require.NoError(t, err)
	require.Equal(t, "panic", f.mode)
	require.Equal(t, int64(7), f.at)
	f, err = parseFault("stall@2")
	require.NoError(t, err)
	require.Equal(t, "stall", f.mode)
	require.Nil(t, (&fault{mode: "exit", at: 1}).stallHook())
	for _, bad := range []string{"exit", "exit@", "exit@0", "exit@-1", "boom@3", "exit@x"} {
		_, err := parseFault(bad)
		require.Error(t, err, bad)
	}
	var none *fault
	none.hit() // a disarmed fault is a no-op
}
