import AsyncHTTPClient
public import NIOCore
public import NIOHTTP1
package import ServiceContextModule

/// One HTTP request as the protocol modules describe it; the core turns it into an
/// async-http-client request with the TLS options and timeouts applied.
public struct HTTPRequestSpec: Sendable {
    /// The absolute `http://` or `https://` URL.
    public var url: String
    /// The request method.
    public var method: HTTPMethod
    /// Request headers. Never logged.
    public var headers: HTTPHeaders
    /// The request body (nil: none).
    public var body: ByteBuffer?
    /// How TLS is checked for an `https://` URL.
    public var tls: TLSOptions
    /// Limit for receiving the response head (connect, TLS, request, status line and headers).
    public var headTimeout: Duration
    /// For streamed bodies: fail when no bytes arrive for this long (detected within twice this).
    /// For whole bodies: the limit for the entire body. Nil means no limit.
    public var idleTimeout: Duration?
    /// The largest whole response body read into memory (streamed bodies are not limited here).
    public var maxBodySize: Int
    /// A cookie store: the request sends its matching cookies and the response's `Set-Cookie` is
    /// stored. Nil (the default): no cookie handling.
    public var cookies: CookieStore?
    /// The trace context whose propagation headers (W3C `traceparent` with a W3C tracer) the request
    /// carries; nil: the task's current context, when a span is active.
    package var traceContext: ServiceContext?
    /// A request answered at once and not repeated per message (SignalR's negotiate): it goes
    /// through a pool that opens at most ``HTTPConnectionOptions/maxConnectingPerHost`` connections
    /// per host, so a burst of them does not leave a connection per request idle in the pool.
    package var isSetUp = false

    /// Makes a request; every parameter is the property of the same name.
    public init(
        url: String,
        method: HTTPMethod = .GET,
        headers: HTTPHeaders = [:],
        body: ByteBuffer? = nil,
        tls: TLSOptions = .default,
        headTimeout: Duration = .seconds(30),
        idleTimeout: Duration? = nil,
        maxBodySize: Int = 16 << 20,
        cookies: CookieStore? = nil
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.tls = tls
        self.headTimeout = headTimeout
        self.idleTimeout = idleTimeout
        self.maxBodySize = maxBodySize
        self.cookies = cookies
    }

    /// The client that carries this request (by its TLS options and proxy), the request for it,
    /// and the proxy it goes through.
    func prepare(runtime: RealtimeRuntime) throws -> (HTTPClient, HTTPClientRequest, ProxyServer?) {
        let endpoint = try Endpoint(url, allowedSchemes: ["http", "https"])
        let (client, proxy) = try runtime.httpClient(for: tls, endpoint: endpoint, setUp: isSetUp)
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers = headers
        runtime.injectTraceContext(traceContext, into: &request.headers)
        cookies?.apply(to: &request.headers, url: url)
        if let body { request.body = .bytes(body) }
        // A client of the caller's carries the TLS settings per request; the runtime's own clients
        // are made for one TLS setting each.
        if endpoint.isSecure, let own = runtime.httpClient, own === client {
            request.tlsConfiguration = try tls.makeTLSConfiguration()
        }
        return (client, request, proxy)
    }

    /// The same for async-http-client's delegate API, whose callbacks run on the connection's event loop.
    func prepareForDelegate(runtime: RealtimeRuntime) throws -> (HTTPClient, HTTPClient.Request, ProxyServer?) {
        let endpoint = try Endpoint(url, allowedSchemes: ["http", "https"])
        let (client, proxy) = try runtime.httpClient(for: tls, endpoint: endpoint, setUp: isSetUp)
        var requestHeaders = headers
        runtime.injectTraceContext(traceContext, into: &requestHeaders)
        cookies?.apply(to: &requestHeaders, url: url)
        let tlsConfiguration = endpoint.isSecure && runtime.httpClient === client ? try tls.makeTLSConfiguration() : nil
        do {
            let request = try HTTPClient.Request(
                url: url, method: method, headers: requestHeaders, body: body.map { .byteBuffer($0) }, tlsConfiguration: tlsConfiguration)
            return (client, request, proxy)
        } catch {
            throw RealtimeError.invalidURL(url)
        }
    }
}

/// A response whose head has arrived.
public struct HTTPResponseHead: Sendable {
    /// The response status.
    public let status: HTTPResponseStatus
    /// The response headers.
    public let headers: HTTPHeaders
    /// The URL that answered, after redirects.
    public let url: String

    /// The media type of `Content-Type` in lower case, without parameters.
    public var mediaType: String? {
        headers.first(name: "content-type").map {
            $0.split(separator: ";", maxSplits: 1).first.map { $0.trimmingSpaces().lowercased() } ?? ""
        }
    }
}

extension Substring {
    func trimmingSpaces() -> Substring {
        var slice = self
        while slice.first == " " || slice.first == "\t" { slice.removeFirst() }
        while slice.last == " " || slice.last == "\t" { slice.removeLast() }
        return slice
    }
}
