// This browser's questions and their answers (localStorage), newest first.

const KEY = "edge-sql-history";
const KEEP = 30;

export function loadHistory() {
  try {
    const entries = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(entries) ? entries : [];
  } catch {
    return [];
  }
}

/** Add an entry (newest first, at most KEEP); when storage is full, drop the oldest. */
export function saveEntry(entry) {
  const entries = [entry, ...loadHistory()].slice(0, KEEP);
  while (entries.length) {
    try {
      localStorage.setItem(KEY, JSON.stringify(entries));
      return;
    } catch {
      if (entries.length === 1) {
        entries[0] = { ...entry, rows: [], rowsDropped: true };  // keep the question and SQL at least
        try { localStorage.setItem(KEY, JSON.stringify(entries)); } catch { /* storage unusable */ }
        return;
      }
      entries.pop();
    }
  }
}

export function clearHistory() {
  localStorage.removeItem(KEY);
}
