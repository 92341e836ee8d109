#!/usr/bin/env python3
"""The dashboard's files under /ui/ (docs/dashboard.md): served without a key from the
coordinator's binary, with the right Content-Type, the Content-Security-Policy and the other
security headers; nothing else is reachable through /ui/ (no directory traversal, however
the path is written), unknown files are 404 and other methods 405; the REST API is not
changed by it. The browser test is test_dashboard.py.

Run: python3 tests/integration/test_ui_static.py (ctest sets RCS_BIN_DIR and RCS_SOURCE_DIR).
"""

import http.client
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcs_harness import SOURCE_DIR  # noqa: E402
from rcs_fixture import CoordinatorTest  # noqa: E402

UI_DIR = os.path.join(SOURCE_DIR, "ui")
TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}


def ui_files():
    """Every file of ui/, as its path under ui/."""
    out = []
    for d, _, files in os.walk(UI_DIR):
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), UI_DIR))
    return sorted(out)


class TestUiStatic(CoordinatorTest):

    def raw(self, method, path, headers=None):
        """One request with the path sent exactly as given (http.client normalizes nothing).
        Returns (status, headers as a lowercase dict, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=30)
        try:
            c.putrequest(method, path, skip_accept_encoding=True)
            for k, v in (headers or {}).items():
                c.putheader(k, v)
            c.endheaders()
            r = c.getresponse()
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        finally:
            c.close()

    def assertSecurityHeaders(self, h):
        csp = h.get("content-security-policy", "")
        directives = dict((d.strip().split(" ", 1) + [""])[:2] for d in csp.split(";"))
        self.assertEqual(directives.get("default-src"), "'none'", csp)
        self.assertEqual(directives.get("script-src"), "'self'", csp)
        self.assertEqual(directives.get("style-src"), "'self'", csp)
        self.assertEqual(directives.get("connect-src"), "'self'", csp)
        self.assertEqual(directives.get("frame-ancestors"), "'none'", csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)
        self.assertEqual(h.get("x-content-type-options"), "nosniff")
        self.assertEqual(h.get("x-frame-options"), "DENY")
        self.assertEqual(h.get("referrer-policy"), "no-referrer")

    def test_every_file_served_as_in_the_repository_without_a_key(self):
        files = ui_files()
        self.assertIn("index.html", files)
        for f in files:
            status, h, body = self.raw("GET", "/ui/" + f)
            self.assertEqual(status, 200, f)
            with open(os.path.join(UI_DIR, f), "rb") as fh:
                self.assertEqual(body, fh.read(), f)
            self.assertEqual(h.get("content-type"), TYPES[os.path.splitext(f)[1]], f)
            self.assertSecurityHeaders(h)
        # /ui/ is index.html; /ui is sent there
        status, h, body = self.raw("GET", "/ui/")
        self.assertEqual(status, 200)
        self.assertTrue(body.startswith(b"<!doctype html>"), body[:40])
        self.assertSecurityHeaders(h)
        status, h, _ = self.raw("GET", "/ui")
        self.assertEqual(status, 308)
        self.assertEqual(h.get("location"), "/ui/")
        # HEAD: the headers, no body
        status, h, body = self.raw("HEAD", "/ui/app.css")
        self.assertEqual((status, body), (200, b""))
        self.assertEqual(h.get("content-type"), TYPES[".css"])

    def test_pages_hold_no_inline_script_or_style_nor_anything_remote(self):
        for f in ui_files():
            with open(os.path.join(UI_DIR, f), encoding="utf-8") as fh:
                text = fh.read()
            if f.endswith(".html"):
                # every script is a file of ours; no inline handler or style attribute
                for tag in re.findall(r"<script\b[^>]*>", text):
                    self.assertRegex(tag, r'src="[^":]+"', f)
                self.assertNotRegex(text, r"<script\b[^>]*>\s*[^<\s]", f)
                self.assertNotRegex(text, r"\son[a-z]+\s*=", f)
                self.assertNotRegex(text, r"\sstyle\s*=", f)
                self.assertNotIn("<style", text, f)
            # nothing from another origin (no CDN), no eval
            self.assertNotRegex(text, r"(src|href)=\"(https?:)?//", f)
            self.assertNotRegex(text, r"@import\s+url\(\s*['\"]?(https?:)?//", f)
            if f.endswith(".js"):
                self.assertNotRegex(text, r"\beval\(|new Function\(|\.innerHTML\s*=", f)

    def test_no_traversal_and_404_for_unknown_files(self):
        for path in ("/ui/js/../index.html", "/ui/../v3/commands/health",
                     "/ui/%2e%2e/%2e%2e/etc/passwd", "/ui/..%2f..%2fetc%2fpasswd",
                     "/ui/../../../../etc/passwd", "/ui/./index.html", "/ui//index.html",
                     "/ui/js/", "/ui/js", "/ui/nope.html", "/ui/index.html%00.png",
                     "/ui/%2fetc%2fpasswd", "/ui/..", "/ui/INDEX.HTML",
                     "/ui/index.html/", "/ui/" + "a" * 1500, "/ui/\\..\\index.html"):
            status, h, body = self.raw("GET", path)
            self.assertEqual(status, 404, path)
            self.assertNotIn(b"root:", body, path)
            self.assertEqual(h.get("content-type"), "text/plain; charset=utf-8", path)
            self.assertSecurityHeaders(h)
        # /uix is not the dashboard, nor the API
        status, _, _ = self.raw("GET", "/uix/index.html")
        self.assertEqual(status, 404)

    def test_other_methods_405(self):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, h, _ = self.raw(method, "/ui/index.html", {"Content-Length": "0"})
            self.assertEqual(status, 405, method)
            self.assertEqual(h.get("allow"), "GET, HEAD")

    def test_a_key_changes_nothing_and_the_api_still_asks_for_one(self):
        status, _, body = self.raw("GET", "/ui/index.html", {"api-key": "rcs_wrong"})
        self.assertEqual(status, 200)
        self.assertStatus(self.coord.api(None).get("/tasks"), 401)
        self.assertStatus(self.admin.get("/tasks"), 200)


if __name__ == "__main__":
    unittest.main()
