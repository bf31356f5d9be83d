"""Authenticated serving of the scheduler's HTTP endpoints, as kube-scheduler serves its secure port: TLS
(cert/key files reloaded on change, or a generated self-signed pair), bearer tokens checked by a TokenReview
and requests by a SubjectAccessReview on the non-resource URL (both delegated to the API server, both cached
briefly), and a few paths (the probes) open to anyone.

The reviews themselves are an adapter's (adapters/kubernetes/reviews.py): here are only the protocols they
implement, the caches and the gate that puts them together.

Here too are the HTTP server (http_server.py), what a route is (route.py) and every route's handler: the probes and
status (status.py), /decisions (decisions.py), /debug (debug.py). The app (metrics_sched/app/) registers them."""

from metrics_sched.serving.authn import CachedAuthenticator, ReviewUnavailable, TokenReviewer, User
from metrics_sched.serving.authz import AccessReviewer, CachedAuthorizer, Decision
from metrics_sched.serving.gate import DEFAULT_ALWAYS_ALLOW_PATHS, RequestGate
from metrics_sched.serving.tls import ServingCertificate, TLSFilesError

__all__ = ["DEFAULT_ALWAYS_ALLOW_PATHS", "AccessReviewer", "CachedAuthenticator", "CachedAuthorizer", "Decision",
           "RequestGate", "ReviewUnavailable", "ServingCertificate", "TLSFilesError", "TokenReviewer", "User"]
