package layers

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) * up(x)), with gate|up one
// merged-column projection and down row-parallel.
type MLP struct {
	GateUp, Down *Linear
	gateUp, act  *Buf
}

// NewMLP loads the MLP module prefix ("model.layers.0.mlp") of hidden features in and out and
// inter intermediate features.
func NewMLP(c *Context, prefix string, hidden, inter int) *MLP {
	c.split(inter, "intermediate_size") // the config's name in the error, before the layers' own
	m := &MLP{
		GateUp: NewMergedColumn(c, prefix, "gate_up_proj", hidden, inter, inter),
		Down:   NewRowParallel(c, prefix+".down_proj", inter, hidden),
	}
	m.gateUp, m.act = c.workspace("mlp.gate_up", m.GateUp.Out), c.workspace("mlp.act", m.Down.In)
	return m
}

// Forward adds the block's output on norm(stream) into the stream; next is the norm that
// follows it.
func (m *MLP) Forward(s *Stream, norm, next *RMSNorm) {
	gateUp := m.gateUp.View()
	s.NormLinear(gateUp, norm, m.GateUp)
	m.Down.AddSwiGLUTo(s, gateUp, m.act.View(), next)
}
