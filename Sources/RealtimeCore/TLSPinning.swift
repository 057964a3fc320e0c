import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore
import NIOPosix
import NIOTLS
public import NIOSSL

/// Checks a server's public key against ``TLSOptions/pinnedPublicKeySHA256``.
///
/// swift-websocket's `WSClient` and async-http-client accept a `TLSConfiguration` but expose no
/// hook into the handshake, so the pin is checked on a verification handshake made with the same
/// TLS settings to the same host and port right before each connection. See Docs/Architecture.md,
/// "TLS", for what that does and does not protect against.
package enum TLSPinning {
    /// The base64 SHA-256 of a certificate's SubjectPublicKeyInfo, the value users pin.
    package static func spkiSHA256(of certificate: NIOSSLCertificate) throws -> String {
        let spki = try certificate.extractPublicKey().toSPKIBytes()
        return Data(SHA256.hash(data: spki)).base64EncodedString()
    }

    /// Connects, completes a verified handshake and compares the leaf key with the pins.
    package static func verify(
        host: String, port: Int, options: TLSOptions, runtime: RealtimeRuntime, timeout: Duration = .seconds(10)
    ) async throws {
        guard !options.pinnedPublicKeySHA256.isEmpty else { return }
        let configuration = try options.makeTLSConfiguration()
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw RealtimeError(.tlsFailure, "could not build the TLS context", underlying: error)
        }
        let serverName = options.serverName ?? host
        // SNI carries host names only; an IP literal (v4 or v6) is sent without it.
        let isIPLiteral = (try? SocketAddress(ipAddress: String(serverName.filter { $0 != "[" && $0 != "]" }), port: 0)) != nil
        let sniName: String? = isIPLiteral ? nil : serverName
        let handshake = runtime.eventLoopGroup.any().makePromise(of: Void.self)
        let bootstrap = ClientBootstrap(group: runtime.eventLoopGroup)
            .connectTimeout(.nanoseconds(Int64(timeout.seconds * 1e9)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = try NIOSSLClientHandler(context: context, serverHostname: sniName)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(promise: handshake))
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: host, port: port).get()
        } catch {
            handshake.fail(error)
            throw RealtimeError(.connectFailed, "could not connect to \(host):\(port) to check the pinned key", underlying: error)
        }
        defer { channel.close(promise: nil) }
        let certificate: NIOSSLCertificate?
        do {
            try await handshake.futureResult.get()
            certificate = try await channel.nioSSL_peerCertificate().get()
        } catch {
            throw RealtimeError(.tlsFailure, "TLS handshake with \(host):\(port) failed", underlying: error)
        }
        guard let certificate else {
            throw RealtimeError(.certificatePinMismatch, "the server presented no certificate")
        }
        let digest = try spkiSHA256(of: certificate)
        guard options.pinnedPublicKeySHA256.contains(digest) else {
            throw RealtimeError(.certificatePinMismatch, "the server's public key matches no pinned key")
        }
    }
}

/// Completes a promise when the TLS handshake finishes, or fails it with the handshake's error.
private final class HandshakeWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private var promise: EventLoopPromise<Void>?

    init(promise: EventLoopPromise<Void>) { self.promise = promise }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event {
            promise?.succeed()
            promise = nil
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise?.fail(error)
        promise = nil
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise?.fail(ChannelError.eof)
        promise = nil
        context.fireChannelInactive()
    }
}
