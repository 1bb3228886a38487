package engineshim

import enginev1 "switchyard.dev/gen/switchyard/engine/v1"

func keepWhole(p *prompts, req *enginev1.GenerateRequest) uint64 { return p.keep(req, whole{}) }

func onBase(p *prompts, req *enginev1.GenerateRequest) (uint64, error) {
	w, err := p.expand(req)
	if err != nil {
		return 0, err
	}
	return p.keep(req, w), nil
}
