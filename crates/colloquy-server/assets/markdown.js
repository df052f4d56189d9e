// The model's Markdown, a safe subset of it, as DOM nodes: paragraphs and line breaks,
// **bold**, *italic*, `code`, fenced code blocks, bullet and numbered lists (nested by
// indentation), headings as bold lines, and links to http(s) addresses. Nothing a model sends
// becomes markup: its text lands in text nodes only, and a link's address in an `href` only
// once it parses as http(s). What is not (or not yet) Markdown stays as written, so a reply
// reads the same while it streams as when it is whole.

const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const ITEM = /^([ \t]*)([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
const HEADING = /^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
/** What a backslash makes literal (CommonMark's ASCII punctuation). */
const ESCAPABLE = /[!-/:-@[-`{-~]/;
const LINK = /^\[([^\]\n]+)\]\(\s*<?([^\s)<>]+)>?\s*\)/;

/** `text` rendered: a list of block nodes (paragraphs, lists, code blocks). */
export function renderMarkdown(text) {
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  const out = [];
  let paragraph = null;
  // The lists open at this line, outermost first: {indent, ordered, node, last item}.
  let lists = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      // An unclosed fence (a reply still streaming) runs to the end of the text.
      const close = new RegExp(`^ {0,3}${fence[1][0] === '`' ? '`' : '~'}{${fence[1].length},}[ \\t]*$`);
      const body = [];
      for (i += 1; i < lines.length && !close.test(lines[i]); i += 1) body.push(lines[i]);
      const code = element('code', body.join('\n'));
      const lang = fence[2].trim().split(/\s/)[0];
      if (lang) code.dataset.lang = lang;
      out.push(element('pre', code));
      paragraph = null;
      lists = [];
      continue;
    }
    if (!line.trim()) {
      paragraph = null;
      lists = [];
      continue;
    }
    const item = ITEM.exec(line);
    if (item) {
      paragraph = null;
      lists = listItem(out, lists, indentOf(item[1]), item[2], item[3]);
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      out.push(element('p', { class: 'heading' }, element('strong', ...inline(heading[1]))));
      paragraph = null;
      lists = [];
      continue;
    }
    if (lists.length) {
      // A line right under an item carries on that item.
      lists.at(-1).last.append(document.createElement('br'), ...inline(line.trim()));
    } else if (paragraph) {
      paragraph.append(document.createElement('br'), ...inline(line.trim()));
    } else {
      paragraph = element('p', ...inline(line.trim()));
      out.push(paragraph);
    }
  }
  return out;
}

/** Adds one list item to the open lists (or starts them); returns the lists open after it. */
function listItem(out, open, indent, marker, content) {
  const lists = [...open];
  const ordered = /\d/.test(marker);
  while (lists.length && indent < lists.at(-1).indent - 1) lists.pop();
  let top = lists.at(-1);
  const start = (parent) => {
    const list = document.createElement(ordered ? 'ol' : 'ul');
    const number = Number.parseInt(marker, 10);
    if (ordered && number !== 1) list.start = number;
    if (parent) parent.last.append(list);
    else out.push(list);
    top = { indent, ordered, node: list, last: null };
    lists.push(top);
  };
  if (top && indent >= top.indent + 2) start(top);
  else if (!top || top.ordered !== ordered) {
    if (top) lists.pop();
    start(lists.at(-1));
  }
  top.last = element('li', ...inline(content));
  top.node.append(top.last);
  return lists;
}

function indentOf(space) {
  return [...space].reduce((n, c) => n + (c === '\t' ? 4 : 1), 0);
}

/** The inline nodes of one line: code spans, emphasis, links; the rest as text. */
function inline(text) {
  const nodes = [];
  let plain = '';
  const flush = () => {
    if (plain) nodes.push(document.createTextNode(plain));
    plain = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '\\' && ESCAPABLE.test(text[i + 1] ?? '')) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === '`') {
      const run = /^`+/.exec(text.slice(i))[0];
      const end = closingRun(text, run, i + run.length);
      if (end < 0) {
        plain += run;
        i += run.length;
        continue;
      }
      flush();
      nodes.push(element('code', text.slice(i + run.length, end)));
      i = end + run.length;
      continue;
    }
    if (c === '*' || c === '_') {
      const span = emphasis(text, i);
      if (span) {
        flush();
        nodes.push(span.node);
        i = span.end;
        continue;
      }
    }
    if (c === '[') {
      const link = LINK.exec(text.slice(i));
      const href = link && webAddress(link[2]);
      if (href) {
        flush();
        nodes.push(element('a', { href, rel: 'noopener noreferrer', target: '_blank' }, ...inline(link[1])));
        i += link[0].length;
        continue;
      }
      if (link) {
        // Any other scheme (javascript:, data:, a relative path) stays text, as written.
        plain += link[0];
        i += link[0].length;
        continue;
      }
    }
    plain += c;
    i += 1;
  }
  flush();
  return nodes;
}

/** Where a code span opened by `run` closes: the same number of backticks, no more. */
function closingRun(text, run, from) {
  for (let at = text.indexOf(run, from); at >= 0; at = text.indexOf(run, at + 1)) {
    if (text[at + run.length] !== '`' && text[at - 1] !== '`') return at;
  }
  return -1;
}

const wordy = (c) => c !== undefined && /[\p{L}\p{N}]/u.test(c);
const blank = (c) => c === undefined || /\s/.test(c);

/** `**strong**`, `__strong__`, `*em*` or `_em_` opening at `i`, or null when it is text. */
function emphasis(text, i) {
  const c = text[i];
  const double = text[i + 1] === c;
  const marker = double ? c + c : c;
  const from = i + marker.length;
  // An underscore inside a word (snake_case) is a letter, not emphasis.
  if (c === '_' && wordy(text[i - 1])) return null;
  if (blank(text[from]) || text[from] === c) return null;
  for (let at = text.indexOf(marker, from + 1); at >= 0; at = text.indexOf(marker, at + 1)) {
    if (blank(text[at - 1])) continue;
    if (!double && (text[at + 1] === c || text[at - 1] === c)) continue;
    if (c === '_' && wordy(text[at + marker.length])) continue;
    const inner = inline(text.slice(from, at));
    return { node: element(double ? 'strong' : 'em', ...inner), end: at + marker.length };
  }
  return null;
}

/** `address` as an absolute http(s) URL, or null. */
function webAddress(address) {
  try {
    const url = new URL(address);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch {
    return null;
  }
}

/** An element with attributes (a plain object first, if any) and children (strings become
 * text nodes). */
function element(tag, ...rest) {
  const node = document.createElement(tag);
  const first = rest[0];
  if (first && typeof first === 'object' && !(first instanceof Node)) {
    rest.shift();
    for (const [key, value] of Object.entries(first)) {
      if (key === 'class') node.className = value;
      else node.setAttribute(key, value);
    }
  }
  node.append(...rest);
  return node;
}
