public import Foundation
public import NIOHTTP1
public import RealtimeCore
import Tracing
import NIOCore

/// A REST reply: status, headers and body.
public struct SpreadbotResponse: Sendable {
    /// The response status.
    public let status: HTTPResponseStatus
    /// The response headers.
    public let headers: HTTPHeaders
    /// The response body.
    public let body: Data

    /// The body as UTF-8 text, if it is.
    public var text: String? { String(data: body, encoding: .utf8) }

    /// The body parsed as JSON.
    public func json() throws -> JSONValue { try JSONValue(parsing: String(decoding: body, as: UTF8.self)) }

    /// The body decoded as `T` with `JSONDecoder`.
    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(type, from: body)
    }

    /// What the seed's callbacks receive: the JSON object (`[String: Any]`, `[Any]`, a string, a
    /// number...) when the body parses as JSON, else the text, else the bytes.
    public var value: Any {
        if !body.isEmpty, let object = try? JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed]) { return object }
        return text ?? body
    }
}

/// The seed's `SpreadbotREST`: `GET` and `POST` on the Spreadbot server's base URL with the bearer
/// token, a 5 s timeout, retries on network errors and 5xx, an offline queue and token refresh.
///
/// Rules (Sources/SpreadbotClient/SpreadbotClient.docc/SpreadbotGuide.md, "REST"):
/// - up to ``SpreadbotConfiguration/requestAttempts`` attempts (3) on network errors and 5xx, the
///   delay doubling from ``SpreadbotConfiguration/retryDelay`` on the runtime's clock;
/// - a 4xx other than 401 fails at once: `RealtimeError/Code/badStatus` with the status and the
///   body (first 512 bytes) in `RealtimeError/serverMessage`;
/// - a 401 refreshes the token once (shared with every concurrent caller) and retries once;
/// - while the network is unreachable, up to ``SpreadbotConfiguration/offlineQueueCapacity`` (100)
///   requests wait for it, in order; the next is refused with `RealtimeError/Code/queueFull`.
public final class SpreadbotREST: Sendable {
    /// The configuration the client was made with.
    public let configuration: SpreadbotConfiguration
    let http: SpreadbotHTTP
    let offline: OfflineGate

    /// A client of its own (its own tokens).
    public convenience init(configuration: SpreadbotConfiguration) {
        self.init(auth: SpreadbotAuth(configuration: configuration))
    }

    /// The seed's form (see ``SpreadbotConfiguration/init(dictionary:runtime:)``).
    public convenience init(config: [String: Any]) {
        self.init(configuration: SpreadbotConfiguration(dictionary: config))
    }

    init(auth: SpreadbotAuth) {
        self.configuration = auth.configuration
        self.http = SpreadbotHTTP(auth: auth)
        self.offline = OfflineGate(capacity: auth.configuration.offlineQueueCapacity)
    }

    /// The tokens in use (they change after a refresh).
    public var tokens: SpreadbotTokens { http.auth.tokens }

    /// How many token refreshes this client (and the clients sharing its tokens) ran.
    public var refreshCount: Int { http.auth.refreshCount }

    /// Requests waiting for the network now.
    public var offlineQueueCount: Int { offline.count }

    /// Called with the new tokens after every refresh, so the app can store them.
    public func onTokensRefreshed(_ handler: @escaping @Sendable (SpreadbotTokens) -> Void) {
        http.auth.onTokensRefreshed(handler)
    }

    /// `GET <baseURL>/<path>`.
    public func getData(path: String) async throws -> SpreadbotResponse {
        try await request(.GET, path: path, body: nil, contentType: nil)
    }

    /// `POST <baseURL>/<path>` with `payload` (`application/json` if it parses as JSON, else
    /// `application/octet-stream`).
    public func postData(path: String, payload: Data) async throws -> SpreadbotResponse {
        let isJSON = (try? JSONSerialization.jsonObject(with: payload, options: [.fragmentsAllowed])) != nil
        return try await request(.POST, path: path, body: payload, contentType: isJSON ? "application/json" : "application/octet-stream")
    }

    /// Any method, path and body.
    public func request(_ method: HTTPMethod, path: String, body: Data?, contentType: String?) async throws -> SpreadbotResponse {
        let span = configuration.runtime.startClientSpan("realtime.rest", protocol: "spreadbot", client: configuration.clientLabel)
        span.attributes["http.request.method"] = "\(method)"
        span.attributes["realtime.path"] = path
        defer { span.end() }
        do {
            let response = try await span.withContextBound {
                try await self.send(method, path: path, body: body, contentType: contentType)
            }
            span.attributes["http.response.status_code"] = Int(response.status.code)
            return response
        } catch {
            span.fail(error)
            throw error
        }
    }

    private func send(_ method: HTTPMethod, path: String, body: Data?, contentType: String?) async throws -> SpreadbotResponse {
        var headers = HTTPHeaders()
        headers.add(name: "Accept", value: "application/json")
        if let contentType { headers.add(name: "Content-Type", value: contentType) }
        let (head, reply) = try await http.sendRetrying(
            method: method, url: configuration.url(for: path), headers: headers, body: body.map { ByteBuffer(bytes: $0) }, offline: offline)
        return SpreadbotResponse(status: head.status, headers: head.headers, body: Data(reply.readableBytesView))
    }

    /// The seed's callback form: `onSuccess` gets ``SpreadbotResponse/value`` (the parsed JSON),
    /// `onError` a `RealtimeError`; either is called on the main actor.
    public func getData(path: String, onSuccess: @escaping @MainActor @Sendable (Any) -> Void, onError: @escaping @MainActor @Sendable (any Error) -> Void) {
        deliver(onSuccess: onSuccess, onError: onError) { try await self.getData(path: path) }
    }

    /// The seed's callback form of ``postData(path:payload:)``, delivered on the main actor.
    public func postData(path: String, payload: Data, onSuccess: @escaping @MainActor @Sendable (Any) -> Void, onError: @escaping @MainActor @Sendable (any Error) -> Void) {
        deliver(onSuccess: onSuccess, onError: onError) { try await self.postData(path: path, payload: payload) }
    }

    private func deliver(
        onSuccess: @escaping @MainActor @Sendable (Any) -> Void, onError: @escaping @MainActor @Sendable (any Error) -> Void,
        _ operation: @escaping @Sendable () async throws -> SpreadbotResponse
    ) {
        // Unstructured: the seed's callback API returns at once and reports on the main actor.
        Task {
            do {
                let response = try await operation()
                await MainActor.run { onSuccess(response.value) }
            } catch {
                await MainActor.run { onError(error) }
            }
        }
    }
}
