// Starts the vendored Swagger UI on /docs (no inline script: the CSP allows only our files).
// "Try it out" requests carry the session cookie and, for writes, the page's CSRF token.
(function () {
  "use strict";
  function start() {
    var root = document.getElementById("swagger-ui");
    var meta = document.querySelector('meta[name="csrf-token"]');
    var csrf = meta ? meta.getAttribute("content") : "";
    window.ui = window.SwaggerUIBundle({
      url: root.dataset.openapiUrl,
      domNode: root,
      deepLinking: true,
      presets: [window.SwaggerUIBundle.presets.apis],
      requestInterceptor: function (request) {
        if (csrf && request.method && request.method.toUpperCase() !== "GET") {
          request.headers["X-CSRF-Token"] = csrf;
        }
        return request;
      },
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
