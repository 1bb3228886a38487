package frontend

import (
	"net/http"
	"slices"
	"time"
)

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Anthropic's model list fields, so Claude Code's gateway model
	// discovery reads the same list.
	Type        string `json:"type"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func (s *Service) modelInfo(id string) model {
	return model{ID: id, Object: "model", Created: s.created, OwnedBy: "switchyard",
		Type: "model", DisplayName: id, CreatedAt: timeRFC3339(s.created)}
}

// modelNames are the names the served model answers to: Model, then its
// aliases.
func (s *Service) modelNames() []string {
	return append([]string{s.cfg.Model}, s.cfg.ModelAliases...)
}

// checkModel answers a request for a model this frontend does not serve as
// OpenAI and Anthropic do: 404, OpenAI's code model_not_found, Anthropic's
// not_found_error. A request that names no model gets the served one.
func (s *Service) checkModel(name string) error {
	if name == "" || slices.Contains(s.modelNames(), name) {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Kind: "not_found_error", Code: "model_not_found",
		Message: "the model " + name + " does not exist"}
}

// answerModel is the model an answer names: the one the request named, or
// the served one for a request that names none.
func (s *Service) answerModel(requested string) string {
	if requested == "" {
		return s.cfg.Model
	}
	return requested
}

// serveModels is GET /v1/models, in a shape both OpenAI and Anthropic
// clients accept.
func (s *Service) serveModels(w http.ResponseWriter, r *http.Request) error {
	var list []model
	for _, name := range s.modelNames() {
		list = append(list, s.modelInfo(name))
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": list,
		"has_more": false, "first_id": list[0].ID, "last_id": list[len(list)-1].ID,
	})
}

// serveModel is GET /v1/models/{id}.
func (s *Service) serveModel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.checkModel(id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.modelInfo(id))
}

func timeRFC3339(unix int64) string { return time.Unix(unix, 0).UTC().Format(time.RFC3339) }
