"""PII pseudonymisation: e-mail addresses, IP addresses and host names replaced by consistent stand-ins (``<email-1>``, ``<ip-2>``, ``<host-1>``).

One ``Pseudonyms`` table per run, so the same node keeps the same name in every output and in every
file of a bundle and multi-node timelines still line up. Loopback and wildcard addresses and
well-known public domains (huggingface.co, github.com, ...) are kept: they identify nobody.
"""

from __future__ import annotations

import re

from oomdoctor.input.patterns import lazy

# Public services whose names identify nobody; kept so links and download errors stay readable.
PUBLIC_DOMAINS = (
    "huggingface.co",
    "hf.co",
    "github.com",
    "githubusercontent.com",
    "pytorch.org",
    "python.org",
    "pypi.org",
    "nvidia.com",
    "vllm.ai",
    "ray.io",
    "sglang.ai",
    "docs.sglang.ai",
    "readthedocs.io",
    "modelscope.cn",
    "docker.com",
    "docker.io",
    "nvcr.io",
    "ghcr.io",
    "googleapis.com",
    "anaconda.org",
    "conda.io",
)
_KEEP_IPS = ("0.0.0.0", "255.255.255.255", "::", "::1")
# Top-level domains a host name in a server log ends with (public and the usual internal ones);
# file suffixes and attribute names that are also TLDs (.py, .sh, .md, .so, .rs, .info, .app, .in,
# .it) are left out on purpose: torch.cuda.memory or server.app is not a host.
_TLDS = (
    "com|net|org|edu|gov|mil|io|ai|dev|cloud|co|internal|local|localdomain|lan|corp|intranet|intra|"
    "svc|arpa|us|uk|de|fr|cn|jp|kr|ca|au|nl|se|ch|eu|ru|br|sg|tw|hk|il|pl|fi|dk"
)
_EMAIL_RE = lazy("@", r"(?<![\w.+%-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])")
_IPV4_RE = lazy(".", r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6_RE = lazy(":", r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_FQDN_RE = lazy(
    ".",
    r"(?<![\w.@-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:" + _TLDS + r")(?![\w-]|\.[A-Za-z0-9])",
    re.I,
)
# The host of a URL with user info (scheme://user:pass@HOST, the user info already redacted): a host
# however it is spelled, bare or dotted, whatever its last label (the FQDN pattern leaves a name after '@' alone).
_URL_HOST_RE = lazy(
    "@",
    r"(://[^\s/@'\"]*@)(?P<h>[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)(?![\w-])",
)
# Where a bare host name is named: hostname=..., host: ..., --host ..., MASTER_ADDR=..., NCCL's
# "node-7:1234:1234 [0] NCCL INFO" prefix, torch's "connect to [node-7]:29500".
_HOST_CONTEXT = (
    lazy(
        None,
        r"(?i)(?:(?<![\w-])--(?:host|dist-init-addr|master-addr|master_addr|node-name)[ =]"
        r"|(?<![\w-])['\"]?(?:host_?name|host|node_?name|nodename|master_addr|server_name|dist_init_addr)['\"]?\s*[=:]\s*['\"]?)"
        r"(?P<h>[A-Za-z][A-Za-z0-9-]{1,62})(?![\w.-]*\.\w)",
    ),
    lazy("NCCL", r"(?:^|\s)(?P<h>[A-Za-z][A-Za-z0-9-]{1,62}):\d+:\d+ \[\d+\] NCCL"),
    lazy("]:", r"\[(?P<h>[A-Za-z][A-Za-z0-9-]{1,62})\]:\d+"),
)
_NOT_HOSTS = frozenset(
    {
        "localhost", "none", "null", "true", "false", "auto", "any", "all", "default", "unknown", "info", "warning", "error", "debug", "the", "and",
        "for", "with", "from", "node", "host", "server", "gpu", "cpu", "cuda", "nccl", "gloo", "tcp", "udp", "http", "https", "env", "file",
    }
)


class Pseudonyms:
    """One table of stand-ins per run: the same value always gets the same ``<kind-N>``."""

    def __init__(self) -> None:
        self._names: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def get(self, kind: str, value: str) -> str:
        key = (kind, value.lower())
        name = self._names.get(key)
        if name is None:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            name = self._names[key] = f"<{kind}-{self._counts[kind]}>"
        return name

    def table(self) -> dict[str, str]:
        """Placeholder -> original, for the user to keep privately (never written into a report)."""
        return {name: value for (_, value), name in self._names.items()}

    def __len__(self) -> int:
        return len(self._names)


def _public(host: str) -> bool:
    host = host.lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in PUBLIC_DOMAINS)



def _ip(p: Pseudonyms, text: str) -> str:
    import ipaddress  # only when a log holds an address-like token: a plain diagnose never pays for it

    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return text  # 999.1.2.3, a version string, a C++ scope "c10::"
    if text in _KEEP_IPS or addr.is_loopback or addr.is_unspecified:
        return text
    if addr.version == 6 and "::" not in text and text.count(":") < 7:
        return text
    return p.get("ip", addr.compressed)


class Pseudonymizer:
    """Replaces e-mails, IP addresses and host names in text by the stand-ins of one ``Pseudonyms`` table, learning host names as they are named."""

    def __init__(self, pseudonyms: Pseudonyms) -> None:
        self.pseudonyms = pseudonyms
        self._hosts: set[str] = set()
        self._hosts_re: re.Pattern[str] | None = None

    def learn(self, text: str) -> None:
        """Collect host names named in ``text`` (hostname=..., NCCL prefixes) without replacing anything."""
        for pattern in _HOST_CONTEXT:
            for m in pattern.finditer(text):
                self.add_hostname(m.group("h"))

    def add_hostname(self, name: str) -> None:
        """Treat ``name`` as a host name everywhere from now on (like ``sos clean --domains``)."""
        name = name.strip().rstrip(".")
        if len(name) < 3 or name.lower() in _NOT_HOSTS or _public(name) or name.lower() in self._hosts:
            return
        self._hosts.add(name.lower())
        words = "|".join(re.escape(h) for h in sorted(self._hosts, key=len, reverse=True))
        self._hosts_re = re.compile(r"(?<![\w.-])(?:" + words + r")(?![\w-])", re.I)  # node7.log -> <host-1>.log

    def _url_host(self, m: re.Match[str]) -> str:
        host = m.group("h").rstrip(".")
        if host.lower() in _NOT_HOSTS or _public(host):
            return m.group(0)
        if "." not in host:
            self.add_hostname(host)  # a bare name, learned: replaced wherever else it is named
        return m.group(1) + self.pseudonyms.get("host", host)

    def text(self, text: str) -> str:
        """``text`` with its e-mails, IP addresses and host names replaced (the host names it names learned first)."""
        p = self.pseudonyms
        text = _EMAIL_RE.sub(lambda m: p.get("email", m.group(0)), text)
        text = _IPV4_RE.sub(lambda m: _ip(p, m.group(0)), text)
        if "::" in text or text.count(":") >= 7:
            text = _IPV6_RE.sub(lambda m: _ip(p, m.group(0)), text)
        self.learn(text)
        text = _URL_HOST_RE.sub(self._url_host, text)
        text = _FQDN_RE.sub(lambda m: m.group(0) if _public(m.group(0)) else p.get("host", m.group(0).rstrip(".")), text)
        if self._hosts_re is not None:
            text = self._hosts_re.sub(lambda m: p.get("host", m.group(0)), text)
        return text
