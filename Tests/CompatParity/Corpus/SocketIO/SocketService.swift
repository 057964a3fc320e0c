// A service object owning the manager, with custom SocketData payloads, a configuration built up
// with insert(_:replacing:), onAny logging, acks answered and awaited, and a private handle queue.
import Foundation
import SocketIO

struct Location: SocketData {
    let latitude: Double
    let longitude: Double

    func socketRepresentation() -> SocketData {
        ["lat": latitude, "lng": longitude]
    }
}

final class SocketService {
    private let handleQueue = DispatchQueue(label: "com.example.socket")
    private var manager: SocketManager?
    private var handlerIDs: [UUID] = []
    var onLocationAck: ((Bool) -> Void)?

    func makeConfiguration(token: String, debug: Bool) -> SocketIOClientConfiguration {
        var config: SocketIOClientConfiguration = [.compress, .reconnectWait(3), .reconnectWaitMax(30)]
        config.insert(.connectParams(["token": token]))
        config.insert(.extraHeaders(["Authorization": "Bearer \(token)"]))
        config.insert(.handleQueue(handleQueue))
        if debug { config.insert(.log(true), replacing: true) }
        for option in config where option.description == "log" { print("logging on") }
        return config
    }

    func connect(to url: URL, token: String) {
        let manager = SocketManager(socketURL: url, config: makeConfiguration(token: token, debug: false))
        self.manager = manager
        let socket = manager.defaultSocket
        socket.onAny { event in
            print("got \(event.event) with \(event.items ?? [])")
        }
        handlerIDs.append(socket.on("ping-me") { data, ack in
            ack.with("pong", Date().timeIntervalSince1970)
        })
        handlerIDs.append(socket.on(clientEvent: .error) { data, ack in
            print("socket error", data)
        })
        socket.connect()
    }

    func share(_ location: Location) {
        guard let socket = manager?.defaultSocket, socket.status == .connected else { return }
        socket.emitWithAck("location", location).timingOut(after: 10) { [weak self] data in
            let ok = (data.first as? String ?? "passed") == SocketAckStatus.noAck ? false : true
            DispatchQueue.main.async {
                self?.onLocationAck?(ok)
            }
        }
    }

    func disconnect() {
        guard let socket = manager?.defaultSocket else { return }
        for id in handlerIDs { socket.off(id: id) }
        handlerIDs.removeAll()
        socket.disconnect()
        manager = nil
    }
}
