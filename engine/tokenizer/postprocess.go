package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
)

// postProcessor adds special tokens around an encoded sequence when asked.
type postProcessor interface {
	process(ids []int32, addSpecial bool) []int32
}

// noopPost is the ByteLevel post-processor: it only adjusts offsets, which
// this package does not track.
type noopPost struct{}

func (noopPost) process(ids []int32, _ bool) []int32 { return ids }

// templatePost is TemplateProcessing's single-sequence template: a list of
// pieces, each the sequence itself (nil) or a special token's ids.
type templatePost struct {
	pieces [][]int32
}

func (t *templatePost) process(ids []int32, addSpecial bool) []int32 {
	if !addSpecial {
		return ids
	}
	var out []int32
	for _, p := range t.pieces {
		if p == nil {
			out = append(out, ids...)
		} else {
			out = append(out, p...)
		}
	}
	if out == nil {
		out = []int32{}
	}
	return out
}

// sequencePost runs processors in order.
type sequencePost []postProcessor

func (s sequencePost) process(ids []int32, addSpecial bool) []int32 {
	for _, p := range s {
		ids = p.process(ids, addSpecial)
	}
	return ids
}

// templatePieceJSON is one element of a TemplateProcessing template.
type templatePieceJSON struct {
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
}

// buildPostProcessor decodes a tokenizer.json "post_processor" component.
func buildPostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	wrap := func(err error) error { return fmt.Errorf("post_processor %s: %w", typ, err) }
	switch typ {
	case "ByteLevel":
		return noopPost{}, nil
	case "Sequence":
		seq, err := buildSequence(raw, "processors", buildPostProcessor)
		if err != nil {
			return nil, wrap(err)
		}
		return sequencePost(seq), nil
	case "TemplateProcessing":
		var cfg struct {
			Single        []templatePieceJSON `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		t := &templatePost{}
		for _, p := range cfg.Single {
			switch {
			case p.Sequence != nil:
				t.pieces = append(t.pieces, nil)
			case p.SpecialToken != nil:
				st, ok := cfg.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return nil, wrap(fmt.Errorf("special token %q is not in special_tokens", p.SpecialToken.ID))
				}
				t.pieces = append(t.pieces, append([]int32{}, st.IDs...))
			default:
				return nil, wrap(errors.New("template piece is neither Sequence nor SpecialToken"))
			}
		}
		return t, nil
	case "BertProcessing", "RobertaProcessing":
		// Both wrap a single sequence as [cls] A [sep]; the token pairs are
		// [content, id].
		var cfg struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		var cls, sep int32
		if err := json.Unmarshal(cfg.Cls[1], &cls); err != nil {
			return nil, wrap(fmt.Errorf("cls: %w", err))
		}
		if err := json.Unmarshal(cfg.Sep[1], &sep); err != nil {
			return nil, wrap(fmt.Errorf("sep: %w", err))
		}
		return &templatePost{pieces: [][]int32{{cls}, nil, {sep}}}, nil
	}
	return nil, fmt.Errorf("unsupported post_processor type %q", typ)
}
