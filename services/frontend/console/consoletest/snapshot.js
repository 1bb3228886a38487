// What the console shows, read from its DOM by the data-testid attributes:
// the browser tests assert on this, in Go.
(() => {
  const all = (sel, root) => [...(root || document).querySelectorAll(sel)];
  // Shown as the user sees it: laid out (no display: none on it or above),
  // whatever the hidden attribute says.
  const shown = (el) => Boolean(el) && el.getClientRects().length > 0;
  const live = document.querySelector('[data-testid="live-indicator"]');
  const banner = document.getElementById('banner');
  return {
    title: document.title,
    live: live ? live.dataset.state : '',
    liveText: live ? live.textContent.trim() : '',
    keyNeeded: shown(document.querySelector('[data-testid="key-needed"]')),
    keyNeededText: (document.querySelector('[data-testid="key-needed"]') || {}).textContent || '',
    main: shown(document.getElementById('main')),
    tenant: (document.getElementById('tenant') || {}).textContent || '',
    banner: banner && !banner.hidden ? banner.textContent : '',
    workers: all('[data-testid="worker-card"]').map((el) => ({
      id: el.dataset.workerId,
      lease: (el.querySelector('[data-lease]') || { dataset: {} }).dataset.lease || '',
      tiers: all('.tier', el).map((t) => t.dataset.tier + ': ' + t.querySelector('.tier-value').textContent),
    })),
    sessions: all('[data-testid="session-row"]').map((el) => ({
      id: el.dataset.sessionId,
      parentId: el.dataset.parentId || '',
      tenant: el.dataset.tenant,
      depth: Number(el.dataset.depth),
      turns: Number((el.querySelector('[data-testid="session-turns"]') || { dataset: {} }).dataset.value),
      orphan: Boolean(el.querySelector('.tag.orphan')),
      paused: el.classList.contains('paused'),
      pauseReason: (el.querySelector('[data-testid="pause-reason"]') || {}).textContent || '',
      expanded: (el.querySelector('[data-testid="session-toggle"]') || { getAttribute: () => '' }).getAttribute('aria-expanded') === 'true',
      perfetto: (el.querySelector('[data-testid="perfetto-link"]') || { getAttribute: () => '' }).getAttribute('href') || '',
    })),
    turns: all('[data-testid="turn-row"]').map((el) => {
      const cached = el.querySelector('[data-testid="turn-cached"]');
      return {
        requestId: el.dataset.requestId,
        sessionId: el.dataset.sessionId,
        cached: cached && cached.dataset.value !== '' ? Number(cached.dataset.value) : -1,
        cachedText: cached ? cached.textContent : '',
      };
    }),
    chartPoints: all('[data-testid="cache-chart"] circle.dot-hit').length,
    hitRate: (document.querySelector('[data-testid="cache-hit-rate"]') || {}).textContent || '',
    admissions: all('[data-testid="admission"]').length,
    hintsSent: ((document.querySelector('[data-testid="hint-counts"] dd') || { dataset: {} }).dataset.value) || '',
    hintRows: all('[data-testid="hint-row"]').length,
  };
})()
