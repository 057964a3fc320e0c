import Foundation
import NIOCore
import NIOHTTP1
import RealtimeCore

/// The transports a connection may use, tried in the order WebSockets, Server-Sent Events, Long
/// Polling.
public struct HttpTransportType: OptionSet, Sendable, Hashable, CustomStringConvertible {
    /// The set's raw bits.
    public let rawValue: Int
    /// Makes the set from its raw bits.
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// WebSockets.
    public static let webSockets = HttpTransportType(rawValue: 1)
    /// Server-Sent Events (reads) with POSTs (sends).
    public static let serverSentEvents = HttpTransportType(rawValue: 2)
    /// Long polling.
    public static let longPolling = HttpTransportType(rawValue: 4)
    /// Every transport, WebSockets first.
    public static let all: HttpTransportType = [.webSockets, .serverSentEvents, .longPolling]

    /// The transports' names, e.g. "[WebSockets, LongPolling]".
    public var description: String {
        "[" + [HttpTransportType.webSockets, .serverSentEvents, .longPolling].filter { contains($0) }.map(\.negotiateName)
            .joined(separator: ", ") + "]"
    }

    /// The name negotiate uses ("WebSockets", "ServerSentEvents", "LongPolling").
    public var negotiateName: String {
        switch self {
        case .webSockets: "WebSockets"
        case .serverSentEvents: "ServerSentEvents"
        default: "LongPolling"
        }
    }
}

/// The negotiate reply that the connection uses.
struct NegotiateResult: Sendable, Equatable {
    /// The connection's URL after redirects (without the `id` query item).
    var url: String
    /// The value of `id=` on transport requests: `connectionToken` (v1) or `connectionId` (v0).
    var connectionToken: String?
    var connectionId: String?
    /// Transports the server offers, with the transfer formats of each.
    var transports: [(HttpTransportType, Set<TransferFormat>)]
    /// A token from a redirect; used as the bearer token from then on.
    var accessToken: String?
    var negotiateVersion: Int
    var useStatefulReconnect: Bool

    static func == (lhs: NegotiateResult, rhs: NegotiateResult) -> Bool {
        lhs.url == rhs.url && lhs.connectionToken == rhs.connectionToken && lhs.connectionId == rhs.connectionId
            && lhs.transports.map(\.0) == rhs.transports.map(\.0) && lhs.accessToken == rhs.accessToken
    }
}

enum Negotiation {
    /// The reference clients stop after 100 redirects.
    static let maxRedirects = 100

    /// `{base}/negotiate?negotiateVersion=1`, keeping the base URL's own query.
    static func negotiateURL(_ base: String, statefulReconnect: Bool) -> String {
        var path = base
        var query = ""
        if let question = base.firstIndex(of: "?") {
            path = String(base[..<question])
            query = String(base[base.index(after: question)...])
        }
        if !path.hasSuffix("/") { path += "/" }
        var items = query.isEmpty ? [] : [query]
        items.append("negotiateVersion=1")
        if statefulReconnect { items.append("useStatefulReconnect=true") }
        return path + "negotiate?" + items.joined(separator: "&")
    }

    /// Parses a negotiate reply (any content type: some servers send JSON as text/plain).
    static func parse(_ body: [UInt8], url: String) throws(RealtimeError) -> Reply {
        let value: JSONValue
        do {
            value = try body.withTypedBytes { raw throws(JSONParseError) in try JSONReader.parse(raw) }
        } catch {
            throw RealtimeError(.protocolViolation, "the negotiate reply from \(Redaction.url(url)) is not JSON: \(error)")
        }
        guard case .object = value else {
            throw RealtimeError(.protocolViolation, "the negotiate reply from \(Redaction.url(url)) is not a JSON object")
        }
        if let error = value["error"]?.stringValue {
            throw RealtimeError(.refused, "the server refused the negotiation: \(error)", serverMessage: error)
        }
        if let redirect = value["url"]?.stringValue {
            return .redirect(url: redirect, accessToken: value["accessToken"]?.stringValue)
        }
        let version = value["negotiateVersion"]?.intValue ?? 0
        let connectionId = value["connectionId"]?.stringValue
        let token = version >= 1 ? value["connectionToken"]?.stringValue : connectionId
        guard token != nil else {
            throw RealtimeError(.protocolViolation, "the negotiate reply from \(Redaction.url(url)) has no connection id")
        }
        var transports: [(HttpTransportType, Set<TransferFormat>)] = []
        for entry in value["availableTransports"]?.arrayValue ?? [] {
            let formats = Set((entry["transferFormats"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap(TransferFormat.init(rawValue:)) })
            switch entry["transport"]?.stringValue {
            case "WebSockets": transports.append((.webSockets, formats))
            case "ServerSentEvents": transports.append((.serverSentEvents, formats))
            case "LongPolling": transports.append((.longPolling, formats))
            default: continue  // unknown transports are ignored
            }
        }
        return .connection(NegotiateResult(
            url: url, connectionToken: token, connectionId: connectionId, transports: transports, accessToken: nil,
            negotiateVersion: version, useStatefulReconnect: value["useStatefulReconnect"]?.boolValue ?? false))
    }

    enum Reply {
        case redirect(url: String, accessToken: String?)
        case connection(NegotiateResult)
    }

    /// Negotiates, following redirects up to ``maxRedirects``.
    static func negotiate(
        url: String, options: HubConnectionOptions, accessToken initialToken: String?, runtime: RealtimeRuntime
    ) async throws -> NegotiateResult {
        var current = url
        var token = initialToken
        var redirected = false
        for _ in 0...maxRedirects {
            let negotiateURL = negotiateURL(current, statefulReconnect: options.statefulReconnect)
            var headers = options.httpHeaders
            if let token { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)") }
            var request = HTTPRequestSpec(url: negotiateURL, method: .POST, headers: headers, tls: options.tls, headTimeout: options.negotiateTimeout)
            request.maxBodySize = 1 << 20
            request.cookies = options.cookies
            request.isSetUp = true
            let status: HTTPResponseStatus
            let body: [UInt8]
            if let custom = options.negotiateRequest {
                guard let url = URL(string: negotiateURL) else {
                    throw RealtimeError(.invalidURL, "not a URL: \(Redaction.url(negotiateURL))")
                }
                let answer: (status: Int, body: [UInt8])
                do {
                    // The app's client may never call back: negotiateTimeout bounds it as it bounds ours.
                    answer = try await Deadline.run(
                        within: options.negotiateTimeout, runtime: runtime, isPastDeadlinePhase: { false }, abandon: {},
                        timeoutError: RealtimeError(.timeout, "the app's HTTP client (httpClientFactory) did not answer negotiate within \(options.negotiateTimeout)")
                    ) { try await custom(url) }
                } catch let error as RealtimeError where error.code == .timeout {
                    throw error
                } catch {
                    throw RealtimeError(.connectFailed, "negotiate through the app's HTTP client (httpClientFactory) failed", underlying: error)
                }
                (status, body) = (HTTPResponseStatus(statusCode: answer.status), answer.body)
            } else {
                let (head, buffer) = try await HTTPTransport.execute(request, runtime: runtime)
                (status, body) = (head.status, Array(buffer: buffer))
            }
            guard status.code == 200 else {
                throw RealtimeError.badStatus(status, url: negotiateURL, body: String(decoding: body, as: UTF8.self))
            }
            switch try parse(body, url: negotiateURL) {
            case .redirect(let next, let nextToken):
                current = next
                if let nextToken { token = nextToken }
                redirected = true
            case .connection(var result):
                result.url = current
                if redirected { result.accessToken = token }
                return result
            }
        }
        throw RealtimeError(.protocolViolation, "negotiate redirected more than \(maxRedirects) times")
    }

    /// `url` with `id=<token>` appended.
    static func transportURL(_ url: String, connectionToken: String?) -> String {
        guard let token = connectionToken else { return url }
        let encoded = token.addingPercentEncoding(withAllowedCharacters: .urlQueryValueAllowed) ?? token
        return url + (url.contains("?") ? "&" : "?") + "id=" + encoded
    }
}

extension CharacterSet {
    static let urlQueryValueAllowed: CharacterSet = {
        var set = CharacterSet.urlQueryAllowed
        set.remove(charactersIn: "&=+#")
        return set
    }()
}
