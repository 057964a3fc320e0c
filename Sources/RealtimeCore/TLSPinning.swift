import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore
import NIOTLS
package import NIOSSL

/// Checks a server's public key against ``TLSOptions/pinnedPublicKeySHA256`` on the connection's
/// own handshake: WebSocket connections through ``TLSPinGate``, HTTP connections through
/// async-http-client's connection initializers (``verifyConnection(_:pins:)``).
package enum TLSPinning {
    /// The base64 SHA-256 of a certificate's SubjectPublicKeyInfo, the value users pin.
    package static func spkiSHA256(of certificate: NIOSSLCertificate) throws -> String {
        let spki = try certificate.extractPublicKey().toSPKIBytes()
        return Data(SHA256.hash(data: spki)).base64EncodedString()
    }

    /// Throws `certificatePinMismatch` unless the leaf's key is one of `pins`.
    static func check(_ certificate: NIOSSLCertificate?, pins: [String]) throws {
        guard let certificate else {
            throw RealtimeError(.certificatePinMismatch, "the server presented no certificate")
        }
        let digest: String
        do {
            digest = try spkiSHA256(of: certificate)
        } catch {
            throw RealtimeError(.certificatePinMismatch, "could not read the server's public key", underlying: error)
        }
        guard pins.contains(digest) else {
            throw RealtimeError(.certificatePinMismatch, "the server's public key matches no pinned key")
        }
    }

    /// For async-http-client's `http1_1ConnectionDebugInitializer`/`http2ConnectionDebugInitializer`:
    /// they run once the TLS handshake is complete and before the connection carries a request; a
    /// failed future fails the connection. A pinned client refuses connections without TLS.
    static func verifyConnection(_ channel: any Channel, pins: [String]) -> EventLoopFuture<Void> {
        channel.eventLoop.submit {
            let handler: NIOSSLHandler
            do {
                handler = try channel.pipeline.syncOperations.handler(type: NIOSSLHandler.self)
            } catch {
                throw RealtimeError(.certificatePinMismatch, "pinned keys require TLS, and this connection has none")
            }
            try check(handler.peerCertificate, pins: pins)
        }
    }
}

/// Holds every outbound byte of a pinned TLS connection until the handshake has completed and the
/// leaf key matched a pin; on a mismatch the connection is closed with nothing sent.
///
/// It sits right above `NIOSSLClientHandler`, so the chain and host-name verification of the same
/// handshake have already passed when it checks the key. (swift-nio-ssl's callback that would run at
/// that point is underscored, "not guaranteed to be stable"; this handler uses only stable API.)
final class TLSPinGate: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private let pins: [String]
    private var held: [(NIOAny, EventLoopPromise<Void>?)] = []
    private var flushHeld = false
    private var open = false

    init(pins: [String]) { self.pins = pins }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if open { context.write(data, promise: promise) } else { held.append((data, promise)) }
    }

    func flush(context: ChannelHandlerContext) {
        if open { context.flush() } else { flushHeld = true }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !open, case TLSUserEvent.handshakeCompleted = event {
            do {
                let tls = try context.pipeline.syncOperations.handler(type: NIOSSLHandler.self)
                try TLSPinning.check(tls.peerCertificate, pins: pins)
            } catch {
                failHeld(error)
                context.fireErrorCaught(error)
                context.close(promise: nil)
                return
            }
            open = true
            let held = self.held
            self.held = []
            for (data, promise) in held { context.write(data, promise: promise) }
            if flushHeld { context.flush() }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        failHeld(ChannelError.ioOnClosedChannel)
    }

    private func failHeld(_ error: any Error) {
        let held = self.held
        self.held = []
        for (_, promise) in held { promise?.fail(error) }
    }
}
