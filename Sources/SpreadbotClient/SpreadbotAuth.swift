import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) import RealtimeCore

/// The tokens of one client (or of a ``Spreadbot`` and its ``Spreadbot/rest``), and the one
/// refresh that concurrent 401s share.
final class SpreadbotAuth: Sendable {
    private struct State {
        var tokens: SpreadbotTokens
        /// The refresh in progress: every caller that hits a 401 meanwhile waits for it.
        var refreshing: OneShot<String>?
        var refreshCount = 0
        var observers: [@Sendable (SpreadbotTokens) -> Void] = []
    }

    private let state: NIOLockedValueBox<State>
    let configuration: SpreadbotConfiguration

    init(configuration: SpreadbotConfiguration) {
        self.configuration = configuration
        state = NIOLockedValueBox(State(tokens: SpreadbotTokens(accessToken: configuration.accessToken, refreshToken: configuration.refreshToken)))
    }

    var tokens: SpreadbotTokens { state.withLockedValue { $0.tokens } }
    var refreshCount: Int { state.withLockedValue { $0.refreshCount } }

    func onTokensRefreshed(_ observer: @escaping @Sendable (SpreadbotTokens) -> Void) {
        state.withLockedValue { $0.observers.append(observer) }
    }

    /// Headers with `Authorization: Bearer <token>` (when there is a token), and the token used.
    func authorize(_ headers: inout HTTPHeaders) -> String? {
        for (name, value) in configuration.headers where !headers.contains(name: name) { headers.add(name: name, value: value) }
        let token = state.withLockedValue { $0.tokens.accessToken }
        if let token { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)") }
        return token
    }

    /// A new access token after `rejected` was refused with a 401. If another caller already
    /// replaced `rejected`, returns the newer token at once; if a refresh is running, waits for it;
    /// otherwise starts one. Throws ``RealtimeError/Code/authenticationFailed`` when it fails.
    ///
    /// The refresh belongs to nobody who waits for it: a caller that is cancelled (a send whose
    /// connection dropped) stops waiting, and the refresh goes on to its end, so a refresh token the
    /// server already rotated is stored and never sent again.
    func refresh(replacing rejected: String?) async throws -> String {
        enum Step { case use(String), wait(OneShot<String>) }
        let step = state.withLockedValue { state -> Step in
            if let current = state.tokens.accessToken, current != rejected { return .use(current) }
            if let running = state.refreshing { return .wait(running) }
            let running = OneShot<String>()
            state.refreshing = running
            state.refreshCount += 1
            // Unstructured on purpose: shared by every caller that hits a 401 meanwhile, and it
            // must outlive any of them (see above). Bounded by the request timeout.
            Task {
                let result: Result<String, any Error>
                do {
                    result = .success(try await self.performRefresh())
                } catch {
                    result = .failure(error)
                }
                self.state.withLockedValue { $0.refreshing = nil }
                running.complete(result)
            }
            return .wait(running)
        }
        switch step {
        case .use(let token): return token
        case .wait(let running):
            return try await running.cancellableValue()
        }
    }

    private func performRefresh() async throws -> String {
        let (authURL, credentials, refreshToken) = (configuration.authURL, configuration.base64Credentials, tokens.refreshToken)
        guard let authURL, let refreshToken else {
            throw RealtimeError(.authenticationFailed, "the server answered 401 and no token refresh is configured (authURL and refreshToken)", status: .unauthorized)
        }
        let level: Logger.Level = configuration.log ? .info : .debug
        configuration.runtime.logger.log(level: level, "refreshing the access token", metadata: ["realtime.url": "\(Redaction.url(authURL))"])
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        headers.add(name: "Accept", value: "application/json")
        if let credentials { headers.add(name: "Authorization", value: "Basic \(credentials)") }
        let body = "grant_type=refresh_token&refresh_token=\(Self.formEncode(refreshToken))"
        let request = HTTPRequestSpec(
            url: authURL, method: .POST, headers: headers, body: ByteBuffer(string: body), tls: configuration.tls,
            headTimeout: configuration.requestTimeout, maxBodySize: 1 << 20)
        let head: RealtimeCore.HTTPResponseHead
        let reply: ByteBuffer
        do {
            (head, reply) = try await HTTPTransport.execute(request, runtime: configuration.runtime)
        } catch {
            throw RealtimeError(.authenticationFailed, "the token refresh at \(Redaction.url(authURL)) failed", underlying: error)
        }
        let json = try? JSONValue(parsing: String(buffer: reply))
        guard head.status == .ok else {
            // Only the OAuth error code is kept (RFC 6749 section 5.2): the rest of a body may echo what was sent.
            throw RealtimeError(
                .authenticationFailed, "the token refresh at \(Redaction.url(authURL)) was refused", status: head.status,
                serverMessage: json?["error"]?.stringValue)
        }
        guard let access = json?["access_token"]?.stringValue, !access.isEmpty else {
            throw RealtimeError(.authenticationFailed, "the token refresh at \(Redaction.url(authURL)) answered without an access_token", status: head.status)
        }
        let (tokens, observers) = state.withLockedValue { state -> (SpreadbotTokens, [@Sendable (SpreadbotTokens) -> Void]) in
            state.tokens.accessToken = access
            if let refresh = json?["refresh_token"]?.stringValue, !refresh.isEmpty { state.tokens.refreshToken = refresh }
            state.tokens.expiresIn = json?["expires_in"]?.intValue
            return (state.tokens, state.observers)
        }
        configuration.runtime.logger.log(level: level, "the access token was refreshed")
        for observer in observers { observer(tokens) }
        return access
    }

    /// `application/x-www-form-urlencoded` escaping of one value.
    static func formEncode(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._*")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}

/// HTTP requests with the bearer token, one refresh-and-retry on a 401, and the REST retry rules.
struct SpreadbotHTTP: Sendable {
    let auth: SpreadbotAuth
    var configuration: SpreadbotConfiguration { auth.configuration }

    /// One request, with a single refresh and retry on 401. A 401 that persists after the refresh
    /// is ``RealtimeError/Code/authenticationFailed``. Other statuses are returned as they are.
    func send(method: HTTPMethod, url: String, headers extra: HTTPHeaders = [:], body: ByteBuffer? = nil) async throws -> (RealtimeCore.HTTPResponseHead, ByteBuffer) {
        var refreshed = false
        while true {
            var headers = extra
            let token = auth.authorize(&headers)
            let request = HTTPRequestSpec(
                url: url, method: method, headers: headers, body: body, tls: configuration.tls,
                headTimeout: configuration.requestTimeout, maxBodySize: configuration.maxMessageSize)
            let (head, reply) = try await HTTPTransport.execute(request, runtime: configuration.runtime)
            guard head.status == .unauthorized else { return (head, reply) }
            if refreshed {
                throw RealtimeError(.authenticationFailed, "\(Redaction.url(url)) answered 401 again after the token refresh", status: head.status)
            }
            _ = try await auth.refresh(replacing: token)
            refreshed = true
        }
    }

    /// ``send(method:url:headers:body:)`` with the retry rules: up to ``SpreadbotConfiguration/requestAttempts``
    /// attempts on network errors and 5xx, waiting ``SpreadbotConfiguration/retryDelay`` (doubling)
    /// on the runtime's clock between them; a 4xx fails at once with its status and body. While the
    /// network is unreachable, waits in `offline` (not counted as an attempt).
    func sendRetrying(method: HTTPMethod, url: String, headers: HTTPHeaders = [:], body: ByteBuffer? = nil, offline: OfflineGate) async throws -> (RealtimeCore.HTTPResponseHead, ByteBuffer) {
        let attempts = max(1, configuration.requestAttempts)
        let level: Logger.Level = configuration.log ? .info : .debug
        var attempt = 1
        while true {
            try await offline.pass(configuration.reachability)
            let failure: RealtimeError
            do {
                let (head, reply) = try await send(method: method, url: url, headers: headers, body: body)
                if (200..<300).contains(head.status.code) { return (head, reply) }
                let error = RealtimeError.badStatus(head.status, url: url, body: String(decoding: reply.readableBytesView.prefix(512), as: UTF8.self))
                guard head.status.code >= 500 else { throw error }
                failure = error
            } catch let error as RealtimeError where Self.isNetworkFailure(error) {
                failure = error
            }
            guard attempt < attempts else { throw failure }
            let delay = configuration.retryDelay * (1 << (attempt - 1))
            configuration.runtime.logger.log(
                level: level, "request failed, retrying",
                metadata: [
                    "realtime.method": "\(method)", "realtime.url": "\(Redaction.url(url))", "realtime.error_code": "\(failure.code)",
                    "realtime.attempt": "\(attempt + 1)", "realtime.attempts": "\(attempts)", "realtime.delay": "\(delay)",
                ])
            try await configuration.runtime.sleep(for: delay)
            attempt += 1
        }
    }

    static func isNetworkFailure(_ error: RealtimeError) -> Bool {
        switch error.code {
        case .connectFailed, .timeout, .connectionClosed: true
        default: false
        }
    }
}

/// Where requests wait while the network is unreachable: at most `capacity` at once (the next is
/// refused with `queueFull`), released in the order they came once it is reachable again.
final class OfflineGate: Sendable {
    let capacity: Int
    private let waiting = NIOLockedValueBox(0)
    private let line = FIFOGate()

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    var count: Int { waiting.withLockedValue { $0 } }

    func pass(_ reachability: any Reachability) async throws {
        if count == 0, await reachability.isReachable() { return }
        let admitted = waiting.withLockedValue { waiting -> Bool in
            guard waiting < capacity else { return false }
            waiting += 1
            return true
        }
        guard admitted else { throw RealtimeError.queueFull(capacity: capacity) }
        defer { waiting.withLockedValue { $0 -= 1 } }
        // One at a time in arrival order: the first waits for the network, the rest behind it.
        await line.lock()
        defer { line.unlock() }
        try await reachability.waitUntilReachable()
    }
}
