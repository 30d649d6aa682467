// The Lakestate page inside the Airflow UI: a React plugin view (LakestatePlugin.react_apps), hand-written,
// no build step. The UI imports this module and renders globalThis.Lakestate in its own page, with its own
// React (globalThis.React) and router (globalThis.ReactRouterDOM): no iframe, so links navigate the UI.
// The page itself is rendered by the plugin app (/lakestate/fragment, in the timezone the user picked).

const FRAGMENT = new URL("../fragment", import.meta.url);

// The timezone picked in the UI's user menu: the UI keeps it in localStorage as JSON.
function pickedTimezone() {
  try {
    const stored = globalThis.localStorage.getItem("timezone");
    if (stored) return JSON.parse(stored);
  } catch (error) {
    console.warn("Lakestate: cannot read the picked timezone", error);
  }
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

function copyText(text) {
  if (navigator.clipboard && globalThis.isSecureContext) return navigator.clipboard.writeText(text);
  const area = document.createElement("textarea");  // plain http: the clipboard API is not offered
  area.value = text;
  document.body.appendChild(area);
  area.select();
  document.execCommand("copy");
  area.remove();
  return Promise.resolve();
}

// Copy buttons, on the standalone page (/lakestate/) and in the view.
export function onClick(event) {
  const button = event.target.closest("button[data-copy]");
  if (!button) return false;
  copyText(button.dataset.copy).then(() => { button.textContent = "copied"; },
                                     () => { button.textContent = "copy failed"; });
  return true;
}

function plainLeftClick(event) {
  return event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey && !event.altKey;
}

export default function Lakestate() {
  const React = globalThis.React;
  const navigate = globalThis.ReactRouterDOM.useNavigate();
  const [timezone, setTimezone] = React.useState(pickedTimezone);
  const [page, setPage] = React.useState({ html: null, error: null });

  React.useEffect(() => {  // the UI announces a new pick with a "local-storage" event
    const follow = () => setTimezone(pickedTimezone());
    globalThis.addEventListener("local-storage", follow);
    globalThis.addEventListener("storage", follow);
    return () => {
      globalThis.removeEventListener("local-storage", follow);
      globalThis.removeEventListener("storage", follow);
    };
  }, []);

  React.useEffect(() => {
    let live = true;
    const url = new URL(FRAGMENT);
    url.searchParams.set("tz", timezone);
    fetch(url, { credentials: "same-origin" })
      .then((response) => (response.ok ? response.text()
        : Promise.reject(new Error(`${response.status} ${response.statusText}`))))
      .then((html) => live && setPage({ html, error: null }),
            (error) => live && setPage({ html: null, error: String(error) }));
    return () => { live = false; };
  }, [timezone]);

  const click = (event) => {
    if (onClick(event)) return;
    const link = event.target.closest("a[data-nav]");
    if (!link || !plainLeftClick(event)) return;  // ctrl-click and the like: the browser's new tab
    event.preventDefault();
    navigate(link.getAttribute("href"));
  };

  if (page.error) {
    return React.createElement("p", { className: "lakestate-error", style: { padding: "1rem" } },
                               `The Lakestate page cannot be loaded: ${page.error}`);
  }
  if (page.html === null) return React.createElement("p", { style: { padding: "1rem" } }, "Loading Lakestate…");
  return React.createElement("div", { id: "lakestate-view", style: { padding: "1rem", overflowX: "auto" },
                                      onClick: click, dangerouslySetInnerHTML: { __html: page.html } });
}

globalThis.Lakestate = Lakestate;
