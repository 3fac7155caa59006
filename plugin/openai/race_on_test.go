//go:build race

package openai

// raceEnabled: the race detector slows byte-at-a-time work (JSON decoding) many times over.
const raceEnabled = true
