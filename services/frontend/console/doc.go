// Package console is the operator console's page: the HTML, CSS and
// JavaScript that the frontend serves under /console/, embedded in the
// binary. The page reads one JSON snapshot (GET /console/state), then follows
// the same snapshot live as server-sent events (GET /console/events), and
// draws the fleet, the sessions with their sub-agents and turns, and the
// cache's hit rate against its ideal.
//
// It is only the page: the frontend builds the snapshot and authorizes both
// endpoints. The page must never fetch anything but those endpoints and its
// own assets (no fonts, no CDNs: operators run it offline), and it must never
// put an API key in a URL: the key travels in the Authorization header only.
package console
