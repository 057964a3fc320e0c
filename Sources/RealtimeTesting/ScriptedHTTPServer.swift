import Hummingbird
import HTTPTypes
import HummingbirdCore
import HummingbirdTLS
import NIOConcurrencyHelpers
public import NIOCore
public import NIOSSL

/// A request the scripted server received.
public struct ScriptedRequest: Sendable {
    /// The request method (`GET`, `POST`...).
    public let method: String
    /// The request path, without the query.
    public let path: String
    /// The query (after `?`), if any.
    public let query: String?
    /// Header names in lower case; repeated headers joined with ", ".
    public let headers: [String: String]
    /// The whole request body.
    public let body: ByteBuffer
}

/// What the scripted server answers.
public struct ScriptedResponse: Sendable {
    /// The response body: whole, or streamed.
    public enum Body: Sendable {
        /// The whole body at once.
        case bytes(ByteBuffer)
        /// Chunks written as the feed produces them; the response ends when the feed finishes.
        case feed(ChunkFeed)
    }

    /// The status code.
    public var status: Int
    /// The response headers, in order.
    public var headers: [(String, String)]
    /// The response body.
    public var body: Body

    /// Makes a response; every parameter is the property of the same name.
    public init(status: Int = 200, headers: [(String, String)] = [], body: Body = .bytes(ByteBuffer())) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A text response with its content type.
    public static func text(_ text: String, status: Int = 200, contentType: String = "text/plain") -> ScriptedResponse {
        ScriptedResponse(status: status, headers: [("Content-Type", contentType)], body: .bytes(ByteBuffer(string: text)))
    }
}

/// A stream of response chunks that a test writes on command.
public final class ChunkFeed: Sendable {
    let stream: AsyncStream<ByteBuffer>
    private let continuation: AsyncStream<ByteBuffer>.Continuation

    /// Makes a feed with nothing written yet.
    public init() {
        (stream, continuation) = AsyncStream<ByteBuffer>.makeStream()
    }

    /// Writes `text` as UTF-8.
    public func send(_ text: String) { continuation.yield(ByteBuffer(string: text)) }
    /// Writes `bytes`.
    public func send(_ bytes: [UInt8]) { continuation.yield(ByteBuffer(bytes: bytes)) }
    /// Writes `buffer`.
    public func send(_ buffer: ByteBuffer) { continuation.yield(buffer) }
    /// Ends the response body cleanly.
    public func finish() { continuation.finish() }

    /// Runs `body` once the response ends: finished, or its connection gone (the server stopped
    /// reading the feed).
    public func onTermination(_ body: @escaping @Sendable () -> Void) {
        continuation.onTermination = { _ in body() }
    }
}

/// An HTTP server on loopback whose every answer a test scripts: status codes, headers, bodies
/// streamed chunk by chunk, redirects, stalls. It records every request it receives.
public final class ScriptedHTTPServer: Sendable {
    /// Answers one request on a route.
    public typealias Handler = @Sendable (ScriptedRequest) async throws -> ScriptedResponse

    private let routes = NIOLockedValueBox<[String: Handler]>([:])
    private let log = NIOLockedValueBox<[ScriptedRequest]>([])
    private let server = NIOLockedValueBox<LoopbackServer?>(nil)

    private init() {}

    /// Starts on 127.0.0.1 with an ephemeral port; with `tls`, serves HTTPS.
    public static func start(tls: TLSConfiguration? = nil, maxRequestBody: Int = 16 << 20) async throws -> ScriptedHTTPServer {
        let scripted = ScriptedHTTPServer()
        let router = Router()
        let handle: @Sendable (Request, BasicRequestContext) async throws -> Response = { [weak scripted] request, _ in
            guard let scripted else { return Response(status: .serviceUnavailable) }
            return try await scripted.respond(to: request, maxBody: maxRequestBody)
        }
        for method in [HTTPRequest.Method.get, .post, .put, .delete, .patch, .options, .head] {
            router.on("**", method: method, use: handle)
            router.on("/", method: method, use: handle)
        }
        if let report = HTTPRequest.Method("REPORT") {
            router.on("**", method: report, use: handle)
        }
        let server = try await LoopbackServer.start(
            responder: router,
            server: try tls.map { try HTTPServerBuilder.tls(.http1(), tlsConfiguration: $0) } ?? .http1(),
            secure: tls != nil)
        scripted.server.withLockedValue { $0 = server }
        return scripted
    }

    /// `http://127.0.0.1:<port>` (or `https://`).
    public var baseURL: String { server.withLockedValue { $0?.baseURL ?? "" } }
    /// The port the server listens on, on 127.0.0.1 (0 before it started).
    public var port: Int { server.withLockedValue { $0?.port ?? 0 } }
    /// The same address with `ws`/`wss`: a WebSocket upgrade to it gets the scripted answer, so a
    /// test can refuse an upgrade with any status and body.
    public var webSocketBaseURL: String { server.withLockedValue { $0?.webSocketBaseURL ?? "" } }

    /// Sets the handler for an exact path (no query).
    public func route(_ path: String, _ handler: @escaping Handler) {
        routes.withLockedValue { $0[path] = handler }
    }

    /// Every request received so far, oldest first.
    public var requests: [ScriptedRequest] { log.withLockedValue { $0 } }

    /// The requests received for one path.
    public func requests(to path: String) -> [ScriptedRequest] { requests.filter { $0.path == path } }

    /// Stops the server and closes its connections; waits until they are closed.
    public func stop() async {
        await server.withLockedValue { $0 }?.stop()
    }

    private func respond(to request: Request, maxBody: Int) async throws -> Response {
        var request = request
        let body = try await request.collectBody(upTo: maxBody)
        var headers: [String: String] = [:]
        for field in request.headers {
            let name = field.name.canonicalName
            headers[name] = headers[name].map { $0 + ", " + field.value } ?? field.value
        }
        let scripted = ScriptedRequest(
            method: request.method.rawValue, path: request.uri.path, query: request.uri.query, headers: headers, body: body)
        log.withLockedValue { $0.append(scripted) }
        guard let handler = routes.withLockedValue({ $0[scripted.path] }) else {
            return Response(status: .notFound, body: .init(byteBuffer: ByteBuffer(string: "no route for \(scripted.path)")))
        }
        let answer = try await handler(scripted)
        var fields = HTTPFields()
        for (name, value) in answer.headers {
            if let fieldName = HTTPField.Name(name) { fields.append(HTTPField(name: fieldName, value: value)) }
        }
        let responseBody: ResponseBody
        switch answer.body {
        case .bytes(let bytes): responseBody = ResponseBody(byteBuffer: bytes)
        case .feed(let feed):
            // The feed ends with the response, however it ends: the feed keeps its stream alive, so
            // a response cut short (the client gone) would otherwise never tell the feed's owner,
            // and a server that keeps publishing to it would buffer into it without end.
            responseBody = ResponseBody { writer in
                defer { feed.finish() }
                for await chunk in feed.stream { try await writer.write(chunk) }
                try await writer.finish(nil)
            }
        }
        return Response(status: HTTPResponse.Status(code: answer.status), headers: fields, body: responseBody)
    }
}
