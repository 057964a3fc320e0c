import Foundation
import NIOHTTP1
import NIOSSL
import RealtimeCore
import RealtimeTesting

/// What a client reported of a lost connection: its error (code and stage), or for Socket.IO the
/// disconnect reason (as the JavaScript client names it).
struct Loss: Sendable, CustomStringConvertible {
    let code: String
    let stage: String?
    let status: Int?
    let text: String

    init(_ error: RealtimeError) {
        code = "\(error.code)"
        stage = error.stage.map { "\($0)" }
        status = error.status.map { Int($0.code) }
        text = "\(error)"
    }

    init(reason: String) {
        code = reason
        stage = nil
        status = nil
        text = reason
    }

    var description: String { stage.map { "\(code) (\($0))" } ?? code }
}

/// One protocol and transport under the matrix's faults: its server, and a client of it.
protocol FaultSubject: AnyObject, Sendable {
    /// Starts a server (TLS with `tls`) and returns its port.
    func startServer(tls: TLSConfiguration?) async throws -> Int
    func stopServer() async
    /// Connects a client to `base` (`scheme://127.0.0.1:port` of the fault point), returning once
    /// the first connection is open (and, for an upgrade, upgraded).
    func connect(base: String, tls: TLSOptions, runtime: RealtimeRuntime) async throws
    /// A message each way (or the protocol's round trip), confirmed; throws when it did not come.
    func exchange(_ text: String) async throws
    /// A message sent (or published, for SSE) during an outage: nil once it was delivered and the
    /// other side has it, or what the client reported instead. Never waits forever.
    func sendDuringOutage(_ text: String) async -> String?
    /// A message over the server's limit: what the client reported.
    func sendOversized() async -> RealtimeError?
    /// Connections the client opened so far.
    var opens: Int { get }
    /// Lost connections the client reported, in order.
    var losses: [Loss] { get }
    /// Whether the client gave up reconnecting.
    var gaveUp: Bool { get }
    func stopClient() async
}

extension FaultSubject {
    /// Whether `loss` is a lost connection (and not a handshake, a TLS or a refusal error).
    /// `silent`: the connection went silent, found by a keep-alive. `polling`: the transport is a
    /// series of requests, and the loss may be found by the next one, which cannot reach the server:
    /// a refused connect, a tunnel the proxy cannot open, a tunnel that ends in the TLS handshake
    /// (the proxy reached the relay's port, nothing behind it), or the proxy's own error answer
    /// (a 5xx, for a request it could not forward).
    func isLostConnection(_ loss: Loss, silent: Bool, polling: Bool) -> Bool {
        if loss.stage == nil {
            // Socket.IO's reasons: a transport that closed or broke, or pings unanswered.
            return silent ? loss.code == "ping timeout" : ["transport close", "transport error"].contains(loss.code)
        }
        if polling && !silent {
            let nextRequestFailed = [("connectFailed", "connect"), ("proxyFailed", "proxy"), ("connectionClosed", "tls")]
                .contains(where: { $0 == (loss.code, loss.stage) })
            if nextRequestFailed || (loss.code == "badStatus" && (loss.status ?? 0) >= 500) { return true }
        }
        guard loss.stage == "established" else { return false }
        return silent ? loss.code == "timeout" : ["connectionClosed", "webSocketClosed", "timeout"].contains(loss.code)
    }
}

/// The limit a payload-limit cell's server is started with.
let matrixPayloadLimit = 10_000
