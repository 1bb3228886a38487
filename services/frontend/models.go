package frontend

import (
	"net/http"
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

func (s *Service) modelInfo() model {
	return model{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "switchyard",
		Type: "model", DisplayName: s.cfg.Model, CreatedAt: timeRFC3339(s.created)}
}

// serveModels is GET /v1/models, in a shape both OpenAI and Anthropic
// clients accept.
func (s *Service) serveModels(w http.ResponseWriter, r *http.Request) error {
	m := s.modelInfo()
	return writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": []model{m},
		"has_more": false, "first_id": m.ID, "last_id": m.ID,
	})
}

// serveModel is GET /v1/models/{id}.
func (s *Service) serveModel(w http.ResponseWriter, r *http.Request) error {
	if r.PathValue("id") != s.cfg.Model {
		return &apiError{Status: http.StatusNotFound, Kind: "not_found_error", Code: "model_not_found",
			Message: "the model " + r.PathValue("id") + " does not exist"}
	}
	return writeJSON(w, http.StatusOK, s.modelInfo())
}

func timeRFC3339(unix int64) string { return time.Unix(unix, 0).UTC().Format(time.RFC3339) }
