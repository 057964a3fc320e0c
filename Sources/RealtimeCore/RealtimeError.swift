public import NIOHTTP1

/// An error raised by any realtime client of this package.
///
/// A struct around an internal code so that new cases can be added without breaking users. Compare
/// with the static members (`error.code == .badStatus`), read ``status`` and ``serverMessage`` where
/// the peer said something, and ``underlying`` for the error that caused it.
///
/// Descriptions never contain credentials: URLs are printed with their query values and user info
/// redacted, and no header value is ever printed.
public struct RealtimeError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a comparable value.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Base: String, Hashable, Sendable {
            case invalidURL
            case connectFailed
            case tlsFailure
            case certificatePinMismatch
            case badStatus
            case badContentType
            case protocolViolation
            case messageTooLarge
            case invalidUTF8
            case timeout
            case connectionClosed
            case webSocketClosed
            case queueFull
            case reconnectGaveUp
            case cancelled
            case notConnected
            case refused
            case authenticationFailed
            case proxyFailed
        }
        let base: Base

        /// The URL cannot be used (no host, an unsupported scheme).
        public static let invalidURL = Code(base: .invalidURL)
        /// No TCP connection could be made (refused, unreachable, DNS failure, connect timeout).
        public static let connectFailed = Code(base: .connectFailed)
        /// The TLS handshake failed in a way another attempt does not change: an untrusted or expired
        /// certificate, a wrong host name, no shared cipher or version, a server that does not speak
        /// TLS on the port. A connection that ends during the handshake or after it (no close_notify,
        /// a reset) is ``connectionClosed``, at stage ``Stage/tls`` or ``Stage/established``.
        public static let tlsFailure = Code(base: .tlsFailure)
        /// The server's key matches none of `TLSOptions.pinnedPublicKeySHA256`.
        public static let certificatePinMismatch = Code(base: .certificatePinMismatch)
        /// The server answered with a status the protocol does not accept; ``RealtimeError/status`` holds it.
        public static let badStatus = Code(base: .badStatus)
        /// The server answered with a content type the protocol does not accept.
        public static let badContentType = Code(base: .badContentType)
        /// The server broke the protocol (a malformed frame, packet or message).
        public static let protocolViolation = Code(base: .protocolViolation)
        /// A message is larger than the configured limit (received, or to be sent).
        public static let messageTooLarge = Code(base: .messageTooLarge)
        /// A text message is not valid UTF-8.
        public static let invalidUTF8 = Code(base: .invalidUTF8)
        /// Something did not happen in time (a connect, a handshake, an ack, silence from the server).
        public static let timeout = Code(base: .timeout)
        /// The connection ended unexpectedly: closed or reset by the peer or something between (a
        /// proxy, a relay, a NAT), also without a TLS close_notify. ``RealtimeError/stage`` says
        /// whether it was open; ``RealtimeError/underlying`` holds the cause.
        public static let connectionClosed = Code(base: .connectionClosed)
        /// The server closed the WebSocket; ``RealtimeError/closeCode`` holds its code.
        public static let webSocketClosed = Code(base: .webSocketClosed)
        /// A send queue is full; the message was not accepted (or an older one was dropped for it).
        public static let queueFull = Code(base: .queueFull)
        /// The reconnect policy stopped trying; the underlying error is the last failure.
        public static let reconnectGaveUp = Code(base: .reconnectGaveUp)
        /// The operation was cancelled (by the app, or because the client was stopped).
        public static let cancelled = Code(base: .cancelled)
        /// The client is not connected and does not queue this call.
        public static let notConnected = Code(base: .notConnected)
        /// The server refused the session at the protocol level (a Socket.IO CONNECT_ERROR, a
        /// SignalR handshake error); ``RealtimeError/serverMessage`` says why.
        public static let refused = Code(base: .refused)
        /// The server refused the credentials and they could not be renewed (a failed OAuth token
        /// refresh, or a 401 that persists after one); ``RealtimeError/status`` holds the last status.
        public static let authenticationFailed = Code(base: .authenticationFailed)
        /// The proxy did not open the tunnel: it refused it (``RealtimeError/status`` holds its
        /// answer: 407 for missing or wrong credentials, 403, 502), broke the proxy protocol, or
        /// closed the connection first. The description names the proxy, never its credentials.
        public static let proxyFailed = Code(base: .proxyFailed)

        /// A readable summary, for logs and messages.
        public var description: String { base.rawValue }
    }

    /// Where in a connection's life a failure happened, as a comparable value.
    ///
    /// A connection is opened in stages (``connect``, ``proxy``, ``tls``, ``response``,
    /// ``handshake``) and then lives in one (``established``). The same cause means different things
    /// in different stages: an end of the TCP connection without a TLS close during the TLS
    /// handshake is a handshake that did not complete, after it a connection that was lost (a relay
    /// that died, a NAT that forgot the flow). Reconnect decisions read the ``RealtimeError/code``;
    /// the stage says where to look.
    public struct Stage: Hashable, Sendable, CustomStringConvertible {
        enum Base: String, Hashable, Sendable {
            case local, connect, proxy, tls, response, handshake, established
        }
        let base: Base

        /// Before anything was sent: the URL, the message or the queue was refused here.
        public static let local = Stage(base: .local)
        /// Resolving the host and opening the TCP connection.
        public static let connect = Stage(base: .connect)
        /// Opening the tunnel through an HTTP or SOCKS5 proxy.
        public static let proxy = Stage(base: .proxy)
        /// The TLS handshake, with the certificate and pin checks.
        public static let tls = Stage(base: .tls)
        /// The server's HTTP answer: its status and headers, a WebSocket upgrade's answer.
        public static let response = Stage(base: .response)
        /// The protocol's own opening on the connection: an Engine.IO open packet, a Socket.IO
        /// CONNECT, a SignalR negotiate answer or handshake.
        public static let handshake = Stage(base: .handshake)
        /// The connection was open: messages could flow.
        public static let established = Stage(base: .established)

        /// The stage's name, for logs and messages.
        public var description: String { base.rawValue }
    }

    /// What kind of failure this is; stable across versions, for `switch` and metrics.
    public let code: Code
    /// Where it happened: given by the transport that saw it, else what the code implies
    /// (`connectFailed` while connecting, `tlsFailure` in the handshake, `badStatus` in the answer,
    /// `queueFull` here...); nil where neither tells (a `timeout` of an ack, say).
    public var stage: Stage? { explicitStage ?? Self.impliedStage(code) }
    let explicitStage: Stage?
    /// The HTTP status the server answered with, where there was one.
    public let status: HTTPResponseStatus?
    /// What the server said about the failure (a close reason, a response body excerpt, an error
    /// payload), truncated to 512 bytes.
    public let serverMessage: String?
    /// The WebSocket close code, for ``Code/webSocketClosed``.
    public let closeCode: UInt16?
    /// A short, credential-free explanation.
    public let detail: String
    /// The error that caused this one.
    public let underlying: (any Error)?

    package init(
        _ code: Code,
        _ detail: String,
        status: HTTPResponseStatus? = nil,
        serverMessage: String? = nil,
        closeCode: UInt16? = nil,
        stage: Stage? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.explicitStage = stage
        self.detail = detail
        self.status = status
        self.serverMessage = serverMessage.map { String($0.prefix(512)) }
        self.closeCode = closeCode
        self.underlying = underlying
    }

    /// The same error, at `stage`.
    package func at(_ stage: Stage) -> RealtimeError {
        RealtimeError(code, detail, status: status, serverMessage: serverMessage, closeCode: closeCode, stage: stage, underlying: underlying)
    }

    /// The stage a code implies when the transport gave none.
    static func impliedStage(_ code: Code) -> Stage? {
        switch code.base {
        case .invalidURL, .queueFull, .notConnected: .local
        case .connectFailed: .connect
        case .proxyFailed: .proxy
        case .tlsFailure, .certificatePinMismatch: .tls
        case .badStatus, .badContentType, .authenticationFailed: .response
        case .refused: .handshake
        case .webSocketClosed, .connectionClosed: .established
        case .protocolViolation, .messageTooLarge, .invalidUTF8, .timeout, .reconnectGaveUp, .cancelled: nil
        }
    }

    /// A readable summary, for logs and messages.
    public var description: String {
        var text = "RealtimeError.\(code): \(detail)"
        if let status { text += " (HTTP \(status.code))" }
        if let closeCode { text += " (close code \(closeCode))" }
        if let serverMessage, !serverMessage.isEmpty { text += " server said: \(serverMessage)" }
        if let underlying { text += " caused by: \(ErrorReasons.reason(underlying) ?? Redaction.describe(underlying))" }
        return text
    }
}

extension RealtimeError {
    package static func invalidURL(_ url: String) -> RealtimeError {
        RealtimeError(.invalidURL, "invalid URL \(Redaction.url(url))")
    }

    package static func badStatus(_ status: HTTPResponseStatus, url: String, body: String? = nil) -> RealtimeError {
        RealtimeError(.badStatus, "unexpected status from \(Redaction.url(url))", status: status, serverMessage: body)
    }

    package static func queueFull(capacity: Int) -> RealtimeError {
        RealtimeError(.queueFull, "offline send queue is full (capacity \(capacity))")
    }

    package static func timeout(_ what: String) -> RealtimeError {
        RealtimeError(.timeout, what)
    }
}
